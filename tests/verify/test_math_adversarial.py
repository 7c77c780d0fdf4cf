"""Absurd inputs end in a Verdict, quickly, without crashing.

The time bound is only a guard against a hang (the real hard limit is the
worker pool's); it is generous on purpose and this is not a timing test.
"""

from __future__ import annotations

import time

import pytest

from rlvr.protocol.samples import Verdict
from rlvr.verify.math import MathParams, score_math

GUARD_S = 10.0


def _nested_frac(depth: int) -> str:
    text = "1"
    for _ in range(depth):
        text = "\\frac{1}{1+" + text + "}"
    return text


CASES = {
    "power_tower": "\\boxed{9^{9^{9^{9}}}}",
    "power_tower_unboxed": "The answer is $9^{9^{9^{9}}}$.",
    "huge_exponent_in_product": "\\boxed{2 \\cdot 10^{10^{10}} + 1}",
    "huge_factorial": "\\boxed{(10^{6})!}",
    "nested_braces_100kb": "\\boxed{" + "{" * 50_000 + "}" * 50_000 + "}",
    "unbalanced_braces_100kb": "\\boxed{" + "{" * 100_000,
    "one_megabyte": "x" * 1_000_000,
    "one_megabyte_of_digits": "7" * 1_000_000,
    "one_megabyte_of_boxes": "\\boxed{" * 140_000,
    "nested_frac_depth_20": "\\boxed{" + _nested_frac(20) + "}",
    "nested_frac_depth_500": "\\boxed{" + _nested_frac(500) + "}",
    "many_commas": "\\boxed{" + ",".join(["1"] * 400) + "}",
    "long_sum": "\\boxed{" + "+".join(["x"] * 300) + "}",
    # Prose is searched by math-verify's regexes: they must stay linear too.
    "prose_of_dollars": "$" * 5000,
    "prose_of_parentheses": "(" * 5000 + "1" + ")" * 5000,
    "prose_nested_frac": "so we get " + "\\frac{1}{" * 300 + "2" + "}" * 300 + " done",
    "answer_marker_spam": "the answer is " * 3000,
    "sqrt_tower_in_prose": "so $" + "\\sqrt{" * 200 + "2" + "}" * 200 + "$",
    "power_tower_in_prose": "we get $9^{9^{9^{9}}}$ here",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_absurd_input_returns_a_verdict(name):
    started = time.perf_counter()
    verdict = score_math(CASES[name], MathParams(gold="3"))
    elapsed = time.perf_counter() - started
    assert isinstance(verdict, Verdict)
    assert verdict.reward == 0.0
    assert verdict.outcome in ("wrong", "parse_error")
    assert verdict.extracted is None or len(verdict.extracted) <= 1000
    assert elapsed < GUARD_S, f"{name} took {elapsed:.1f}s"


def test_power_tower_is_a_parse_error_not_a_wrong_answer():
    verdict = score_math("\\boxed{9^{9^{9^{9}}}}", MathParams(gold="3"))
    assert verdict.outcome == "parse_error"
    assert "too large" in verdict.detail


def test_deep_nesting_is_a_parse_error():
    verdict = score_math("\\boxed{" + _nested_frac(500) + "}", MathParams(gold="3"))
    assert verdict.outcome == "parse_error"
