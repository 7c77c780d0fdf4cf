"""Answer extraction and the Verdict contract of ``score_math``."""

from __future__ import annotations

import msgspec
import pytest

from rlvr.verify.math import MathParams, score_math
from rlvr.verify.math.extract import extract_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{1} then \\boxed{\\frac{2}{3}}.", "\\frac{2}{3}"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\fbox{7}", "7"),
        ("$\\boxed 5$", "5"),
        ("\\boxed{1}, \\boxed{2} and \\boxed{3}", "1, 2, 3"),
        ("\\boxed{\\text{(B)}}", "\\text{(B)}"),
    ],
)
def test_boxed_extraction(text, expected):
    assert extract_answer(text, "boxed") == (expected, "boxed")


def test_answer_is_and_hashes_and_last_number_follow_strictness():
    assert extract_answer("Thus the answer is $\\frac{1}{2}$. Done", "answer") == ("\\frac{1}{2}", "answer_is")
    assert extract_answer("**Final Answer:** 42", "answer") == ("42", "answer_is")
    assert extract_answer("48/2 = 24\n#### 1,234", "answer") == ("1,234", "hashes")
    assert extract_answer("I got 3 then 17.", "answer") == (None, "none")
    # Prose is left to the scorer: math-verify searches it, "last number" is the last resort.
    assert extract_answer("I got 3 then 17.", "last_number") == (None, "prose")
    assert extract_answer("the answer is 5", "boxed") == (None, "none")


def test_verdict_fields_for_right_wrong_and_missing_answers():
    right = score_math("Hence $\\boxed{\\dfrac{1}{2}}$.", MathParams(gold="0.5"))
    assert (right.reward, right.outcome, right.verifier) == (1.0, "ok", "math")
    assert right.components == {"accuracy": 1.0} and right.extracted == "\\dfrac{1}{2}" and right.latency_s > 0
    wrong = score_math("\\boxed{3}", MathParams(gold="4"))
    assert (wrong.reward, wrong.outcome, wrong.extracted, wrong.components) == (0.0, "wrong", "3", {"accuracy": 0.0})
    missing = score_math("no idea", MathParams(gold="4"))
    assert (missing.reward, missing.outcome, missing.extracted) == (0.0, "parse_error", None)


def test_params_reject_unknown_fields_and_bad_strictness():
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"gold": "1", "tolerance": 0.1}, MathParams)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"gold": "1", "strictness": "anything"}, MathParams)
    assert msgspec.convert({"gold": "1"}, MathParams).strictness == "last_number"
