"""The built-in example's tiny model: untied by default, tying on request."""

from __future__ import annotations

import pytest
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


def test_the_character_tokenizer_refuses_text_it_cannot_encode(tmp_path):
    from transformers import AutoTokenizer

    from rlvr.learner.example.arith_model import CharsNotEncodableError, build_tokenizer, check_encodable

    tok = build_tokenizer(chat=True)
    assert tok.decode(tok("37+45=82")["input_ids"]) == "37+45=82"
    assert tok.apply_chat_template([{"role": "user", "content": "1+2="}, {"role": "assistant", "content": "3"}],
                                   tokenize=False) == "1+2=3<eos>"
    with pytest.raises(Exception, match="Missing \\[UNK\\]"):  # not 'higher' -> six pad tokens
        tok("higher")
    tok.save_pretrained(tmp_path / "tok")  # as the rollout engines load it
    with pytest.raises(Exception, match="Missing \\[UNK\\]"):
        AutoTokenizer.from_pretrained(tmp_path / "tok")("1 + 2")
    check_encodable("12+7=19<eos>")
    with pytest.raises(CharsNotEncodableError, match="cannot encode: 'h' 'i' 'g' 'e' 'r' ' ' \\(it encodes only"):
        check_encodable("higher 1", "the reply")


def test_the_example_refuses_a_dataset_its_tokenizer_cannot_encode_before_warm_up():
    from rlvr.learner.data.dataset_config import ArithmeticDataset
    from rlvr.learner.data.datasets import load_splits
    from rlvr.learner.example.arith_model import CharsNotEncodableError
    from rlvr.learner.example.prepare import check_tasks_encodable

    bare = load_splits(ArithmeticDataset(max_operand=9, holdout=5), seed=0)
    check_tasks_encodable([*bare.train, *bare.heldout])
    chat = load_splits(ArithmeticDataset(max_operand=9, holdout=5, prompt_style="chat"), seed=0)
    with pytest.raises(CharsNotEncodableError, match="arithmetic task \\d+ 'What is"):
        check_tasks_encodable(chat.train)
