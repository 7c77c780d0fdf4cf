"""``rlvr-actor plan`` on shapes and topologies it was not tuned on: the fix list offers every ZeRO
stage that fits, and GPU-hours count each GPU once (issue 44).

The shapes are built on the meta device from the published configs' dimensions (no weights); the
config is examples/gpu_qwen.toml with the settings each case names.
"""

from __future__ import annotations

import re

import msgspec
import pytest

from rlvr.cli.commands.up import parse_sets
from rlvr.cli.plan.memory import GiB, learner_plan
from rlvr.cli.plan.planner import learner_settings, make_plan, topology
from rlvr.cli.plan.shapes import shape_of_config
from rlvr.cli.run_config import load_config
from tests.conftest import REPO

GPU_QWEN = REPO / "examples/gpu_qwen.toml"


@pytest.fixture(scope="module")
def llama3_8b():
    from transformers import LlamaConfig

    # meta-llama/Meta-Llama-3-8B's config.json dimensions.
    config = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False,
                         max_position_embeddings=8192)
    return shape_of_config(config, "Llama-3-8B's shape")


@pytest.fixture(scope="module")
def qwen05b():
    from transformers import Qwen2Config

    config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True)
    return shape_of_config(config, "Qwen2.5-0.5B's shape")


def config(*sets: str):
    return load_config(GPU_QWEN, overrides=parse_sets(list(sets)))


def zero_fixes(plan) -> list[str]:
    """The fixes that change the ZeRO stage alone (offload's fix names a stage too)."""
    problem = next(p for p in plan.problems if p.role == "learn")
    return [f for f in problem.fixes if re.fullmatch(r"learn\.engine\.zero_stage = \d \(needs .*\)", f)]


@pytest.mark.parametrize("gpu_gib", [32, 48])
def test_the_fix_list_offers_every_higher_zero_stage_that_fits_from_zero_0(llama3_8b, gpu_gib):
    # Llama-3-8B at ZeRO-0 on 8 GPUs (the rollout started elsewhere): ZeRO-0 cannot fit; the fix
    # list names each stage whose own plan fits, and no other.
    cfg = config("learn.engine.zero_stage=0", "learn.engine.micro_batch_tokens=4096", "up.rollout_replicas=0")
    plan = make_plan(cfg, llama3_8b, gpus=8, gpu_bytes=gpu_gib * GiB)
    s, top = learner_settings(cfg), topology(cfg, 8, 1, gpu_gib * GiB)
    fitting = [stage for stage in (1, 2, 3) if learner_plan(
        llama3_8b, msgspec.structs.replace(s, zero_stage=stage), ranks=top.learner_ranks).gpu_bytes <= gpu_gib * GiB]
    assert 3 in fitting  # the case the issue names: ZeRO-3 fits on 8 x 32 GiB
    offered = [int(f.split()[2]) for f in zero_fixes(plan)]
    assert offered == fitting, zero_fixes(plan)


def test_a_shared_single_gpu_is_charged_once(qwen05b):
    # gpu_qwen.toml on one GPU: vLLM and the learner share it.
    plan = make_plan(config(), qwen05b, gpus=1, gpu_bytes=80 * GiB)
    assert plan.topology.shared
    assert plan.cost.gpus == 1
    assert plan.cost.gpu_hours == pytest.approx(plan.cost.run_hours)


def test_no_rollout_replica_charges_only_the_stated_gpus(qwen05b):
    plan = make_plan(config("up.rollout_replicas=0"), qwen05b, gpus=8, gpu_bytes=80 * GiB)
    assert plan.topology.rollout_gpus == 0 and plan.topology.learner_ranks == 8
    assert plan.cost.gpu_hours == pytest.approx(8 * plan.cost.run_hours)


def test_separate_rollout_and_learner_gpus_are_each_charged(qwen05b):
    plan = make_plan(config("up.rollout_replicas=2"), qwen05b, gpus=8, gpu_bytes=80 * GiB)
    assert (plan.topology.rollout_gpus, plan.topology.learner_ranks) == (2, 6)
    assert plan.cost.gpu_hours == pytest.approx(8 * plan.cost.run_hours)


def test_no_rollout_replica_here_is_no_rollout_to_fit_on_these_gpus(qwen05b):
    """up.rollout_replicas = 0: vLLM runs on other machines. Its fit on the learner's GPUs is neither
    checked nor failed (a false FAIL before), and the plan says why."""
    plan = make_plan(config("up.rollout_replicas=0", "rollout.engine.max_model_len=131072"), qwen05b, gpus=1,
                     gpu_bytes=2 * GiB)
    assert not any(p.role == "rollout" for p in plan.problems) and plan.rollout is None
    assert any("rollout_replicas = 0" in w for w in plan.warnings)
