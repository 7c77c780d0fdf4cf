"""The built-in arithmetic dataset: bare prompts for small models, chat prompts for instruct models."""

import pytest

from rlvr.learner.config import ArithmeticDataset
from rlvr.learner.data.datasets import load_splits
from rlvr.protocol.tasks import ChatMessage, VerifierSpec


def test_bare_prompts_pad_operands_by_default():
    splits = load_splits(ArithmeticDataset(ops=("+",), max_operand=12, holdout=10), seed=0)
    assert all(isinstance(t.prompt, str) and len(t.prompt) == len("07+12=") for t in splits.train)


def test_chat_prompts_are_one_user_message_in_the_configured_words():
    cfg = ArithmeticDataset(ops=("+", "-", "*"), max_operand=15, holdout=300, prompt_style="chat")
    splits = load_splits(cfg, seed=0)
    assert len(splits.train) + len(splits.heldout) == 3 * 16 * 16
    for t in splits.heldout + splits.train:
        (message,) = t.prompt
        assert isinstance(message, ChatMessage) and message.role == "user"
        a, op, b = message.content.removeprefix("What is ").split("?")[0].split(" ")
        gold = {"+": int(a) + int(b), "-": int(a) - int(b), "\\times": int(a) * int(b)}[op]
        assert t.verifier == VerifierSpec("exact", {"gold": str(gold)})
        assert message.content.endswith("Put the final answer in \\boxed{}.")


def test_chat_question_template_is_the_users():
    cfg = ArithmeticDataset(ops=("-",), max_operand=3, holdout=2, prompt_style="chat", question="{a} minus {b}?")
    prompts = {t.prompt[0].content for t in load_splits(cfg, seed=1).train}
    assert "3 minus 1?" in prompts | {t.prompt[0].content for t in load_splits(cfg, seed=1).heldout}


def test_chat_held_out_problems_never_reach_training():
    cfg = ArithmeticDataset(ops=("+", "-"), max_operand=15, holdout=300, prompt_style="chat")
    splits = load_splits(cfg, seed=0)
    assert not {t.prompt[0].content for t in splits.train} & {t.prompt[0].content for t in splits.heldout}


@pytest.mark.parametrize("style", ["bare", "chat"])
def test_splits_are_a_pure_function_of_the_seed(style):
    cfg = ArithmeticDataset(max_operand=9, holdout=20, prompt_style=style)
    assert load_splits(cfg, seed=3) == load_splits(cfg, seed=3) != load_splits(cfg, seed=4)
