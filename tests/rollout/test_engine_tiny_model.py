"""The tiny test model: deterministic, loadable, and shaped for vLLM on CPU."""

from __future__ import annotations

import pytest

from rlvr.learner.example.tiny_model import build_tiny_model


def test_tiny_model_is_self_consistent(tiny_model):
    import json

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["vocab_size"] == len(tok) and len(tok) % 64 == 0
    assert config["tie_word_embeddings"] is True
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token_id == tok.eos_token_id
    assert tok.decode(tok("12+7=")["input_ids"]) == "12+7="


def test_tiny_model_rejects_a_head_size_vllm_cpu_lacks(tmp_path):
    with pytest.raises(ValueError, match="head size 16"):
        build_tiny_model(tmp_path, hidden=64, heads=4)
