"""The math verifier does not take the question restated as its answer.

``tests/verify/data/smollm2_arithmetic_answers.jsonl`` holds 80 real responses
of SmolLM2-135M-Instruct policies trained by ``examples/smollm2.toml`` (seed 2,
before the rule existed: versions 10 to 39, 16 tokens at temperature 1) to
held-out "What is a ± b? Put the final answer in \\boxed{}." prompts. By
version 30 nearly every response had become "To solve \\boxed{15 + 6}, we need
to ...": math-verify evaluates the box, finds it equal to the gold, and a
policy that never answers scored 100%. These tests keep that from coming back.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rlvr.verify.math.scorer import MathParams, score_math

DATA = Path(__file__).parent / "data" / "smollm2_arithmetic_answers.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text().splitlines()]
BOXED_ARITHMETIC = re.compile(r"\\boxed\{\s*\d+\s*[-+]\s*\d+\s*\}")


def test_the_real_responses_include_the_hack_and_real_answers():
    hacks = [r for r in ROWS if BOXED_ARITHMETIC.search(r["response"])]
    assert len(hacks) >= 30 and len(ROWS) - len(hacks) >= 30


def test_a_boxed_question_is_wrong_where_math_verify_calls_it_right():
    hacks = [r for r in ROWS if BOXED_ARITHMETIC.search(r["response"])]
    accepted = [r for r in hacks if score_math(r["response"], MathParams(gold=r["gold"], undone_arithmetic="accept")).outcome == "ok"]
    assert len(accepted) >= 30  # the hack was real: accepted, these were "right"
    for r in accepted:
        v = score_math(r["response"], MathParams(gold=r["gold"]))
        assert (v.outcome, v.reward) == ("wrong", 0.0), r
        assert "policy=undone" in v.detail


def test_responses_that_answer_keep_their_verdict():
    answered = [r for r in ROWS if not BOXED_ARITHMETIC.search(r["response"])]
    right = 0
    for r in answered:
        strict = score_math(r["response"], MathParams(gold=r["gold"]))
        lenient = score_math(r["response"], MathParams(gold=r["gold"], undone_arithmetic="accept"))
        assert (strict.outcome, strict.reward) == (lenient.outcome, lenient.reward), r
        right += strict.outcome == "ok"
    assert right >= 5  # "13 + 9 equals \boxed{22}" is still right


@pytest.mark.parametrize(("response", "gold", "outcome"), [
    ("\\boxed{3 \\times 4}", "12", "wrong"),       # LaTeX operators are arithmetic too
    ("The answer is 6+7", "13", "wrong"),          # any located answer, not only a box
    ("\\boxed{2+3}", "2+3", "ok"),                 # a gold written the same way
    ("\\boxed{1/2}", "0.5", "ok"),                 # a fraction is a number
    ("\\boxed{-\\frac{1}{2}}", "-0.5", "ok"),
    ("\\boxed{x+1}", "1+x", "ok"),                 # symbols: not plain arithmetic
    ("\\boxed{-5}", "-5", "ok"),
    ("Answer \\( (9+1) \\)", "10", "ok"),          # prose keeps its own rule
])
def test_what_counts_as_arithmetic_left_undone(response, gold, outcome):
    assert score_math(response, MathParams(gold=gold)).outcome == outcome
