"""Model FLOPs and MFU of a learner step (learner/train/flops.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from rlvr.learner.train.flops import matmul_parameters, peak_for_device_name, step_flops, throughput_metrics

SHAPE = dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)


def test_tied_head_counts_every_parameter_once():
    model = Qwen2ForCausalLM(Qwen2Config(tie_word_embeddings=True, **SHAPE))
    assert matmul_parameters(model) == sum(p.numel() for p in model.parameters())


def test_untied_input_embedding_is_not_a_matmul():
    model = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=False, **SHAPE))
    total = sum(p.numel() for p in model.parameters())
    assert matmul_parameters(model) == total - 100 * 32


def test_step_flops_is_six_n_per_token_plus_attention():
    # Two rows of 3 and 5 tokens: 6 N 8 + 12 L d (9 + 25).
    assert step_flops(1000, 2, 16, [3, 5]) == 6 * 1000 * 8 + 12 * 2 * 16 * 34


def test_throughput_counts_non_padding_tokens_and_gives_no_mfu_on_cpu():
    model = Qwen2ForCausalLM(Qwen2Config(tie_word_embeddings=True, **SHAPE))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    out = throughput_metrics(model, [mask], 2.0, torch.device("cpu"), bf16=True)
    expected = step_flops(matmul_parameters(model), 2, 32, [3, 5]) / 2.0 / 1e12
    assert out == {"model_tflops_per_s": pytest.approx(expected)}


@pytest.mark.parametrize("name,peak", [
    ("NVIDIA H100 80GB HBM3", 989.4),
    ("NVIDIA H100 PCIe", 756.0),
    ("NVIDIA H200", 989.4),
    ("NVIDIA GH200 480GB", 989.4),
    ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA L40S", 362.1),
    ("NVIDIA L4", 121.0),
    ("NVIDIA GeForce RTX 3090", None),
])
def test_peak_by_device_name(name, peak):
    assert peak_for_device_name(name) == peak


def test_engine_step_metrics_carry_model_tflops(model_dir):
    from tests.learner.engine_helpers import batch, make_engine

    engine = make_engine(model_dir, bf16=False)
    try:
        metrics = engine.train_step(batch(0))
    finally:
        engine.close()
    assert metrics["model_tflops_per_s"] > 0 and metrics["tokens_per_s"] > 0
    assert "mfu" not in metrics  # CPU: no peak to divide by
