"""The built-in example's tiny model: untied by default, tying on request."""

from __future__ import annotations

from safetensors import safe_open

from rlvr.learner.example.arith_model import VOCAB_SIZE, build_arith_model


def _weights(folder) -> set[str]:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        return set(f.keys())


def test_default_model_has_its_own_output_head(tmp_path):
    from transformers import AutoModelForCausalLM

    folder = build_arith_model(tmp_path / "m", hidden=32, layers=1, heads=1)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.tie_word_embeddings is False
    assert "lm_head.weight" in _weights(folder)
    assert model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()
    assert model.config.vocab_size == VOCAB_SIZE


def test_tied_model_shares_the_embedding_matrix(tmp_path):
    from transformers import AutoModelForCausalLM

    folder = build_arith_model(tmp_path / "m", hidden=32, layers=1, heads=1, tie_embeddings=True)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.tie_word_embeddings is True
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
