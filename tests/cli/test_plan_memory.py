"""The learner's memory plan against what DeepSpeed really holds (issue 44): ZeRO-1/2's fp32 master
partition and gradient bucket, the gradients' dtype, on a parameter-heavy shape.

The measured test runs bench/plan_vs_measured.py's own case runner: a random-init model of the
shape, the project's ``LearnerEngine`` on real DeepSpeed (CPU), two steps, the resident set's peak.
"""

from __future__ import annotations

import json

import pytest

from bench.plan_vs_measured import run_case
from rlvr.cli.plan import memory
from rlvr.cli.plan.shapes import shape_of_config

# A parameter-heavy shape: a 65,536-token vocabulary, untied, on a 2-layer trunk of width 256 (35M
# parameters, 95% of them in the two tables); 128 tokens make its activations small beside them.
WIDE = dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", vocab_size=65536, hidden_size=256,
            intermediate_size=1024, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
            max_position_embeddings=512, tie_word_embeddings=False, torch_dtype="float32")


def test_the_bucket_and_zero_3_live_parameters_are_deepspeeds_defaults():
    # The learner's DeepSpeed config sets neither (learner/train/engine_setup.py): DeepSpeed's defaults hold.
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    from rlvr.learner.engine_config import TrainEngineConfig
    from rlvr.learner.train.engine_setup import deepspeed_config

    for stage in (1, 2, 3):
        zero = deepspeed_config(TrainEngineConfig(model_path="m", zero_stage=stage))["zero_optimization"]
        assert not {"reduce_bucket_size", "stage3_max_live_parameters"} & set(zero)
    assert memory.REDUCE_BUCKET == DeepSpeedZeroConfig().reduce_bucket_size
    assert memory.MAX_LIVE_PARAMETERS == DeepSpeedZeroConfig().max_live_parameters


def test_zero_1_with_bf16_holds_16_bit_gradients_and_an_fp32_partition_only():
    # DeepSpeed's ZeRO-1 keeps each parameter's gradient in the weights' dtype until the step and
    # hands the optimizer an fp32 copy of the rank's partition: on 8 ranks, never 4 bytes per parameter.
    from transformers import Qwen2Config

    shape = shape_of_config(Qwen2Config(**{k: v for k, v in WIDE.items() if k not in ("architectures", "model_type")}),
                            "wide")
    s = memory.LearnerSettings(bf16=True, zero_stage=1, offload_optimizer=False, gradient_checkpointing=True,
                               micro_batch_tokens=128)
    parts = {p.name: p.bytes for p in memory.model_states(shape, s, ranks=8)}
    assert parts["gradients (16-bit)"] == 2 * shape.params
    assert parts["gradients: fp32 partition at the step"] == 4 * -(-shape.params // 8)
    assert not any(name.startswith("gradients (fp32)") for name in parts)


@pytest.mark.slow
@pytest.mark.parametrize("zero,bf16", [(2, False), (1, True)])
def test_the_plan_is_within_15_percent_of_deepspeeds_measured_peak_on_a_parameter_heavy_shape(tmp_path, zero, bf16):
    config = tmp_path / "wide" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(WIDE))
    row = run_case({"shape": str(config), "tokens": 128, "zero": zero, "ckpt": False, "bf16": bf16, "ranks": 1})
    assert 0.85 <= row["plan_over_measured"] <= 1.15, row
