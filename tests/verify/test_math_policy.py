"""The named policies of the math verifier, the route it reports, and its
per-process gold cache.

Every case here is one where math-verify alone, the old hand-written
verifier and this one could disagree; ``Verdict.detail`` names the route that
found the answer and the policy that decided.
"""

from __future__ import annotations

import pytest

from rlvr.verify.math import MathParams, score_math
from rlvr.verify.math.scorer import _gold

CASES = [
    # (response, gold, reward, route, policy)
    ("\\frac{10}{9}", "10/9", 1.0, "bare", "number"),  # never "9" by last number
    ("x^2 - 2x + 2", "2 - 2x + x^2", 1.0, "bare", "math_verify"),
    ("(6, 1)", "\\left(6, 1\\right)", 1.0, "bare", "math_verify"),
    ("1, 6", "(6,1)", 0.0, "bare", "ordered"),  # a bare list against a point keeps its order
    ("[-2, 5]", "[-2,5)", 0.0, "bare", "math_verify"),
    ("\\boxed{[3, \\frac{\\pi}{2}]}", "\\left( 3, \\frac{\\pi}{2} \\right)", 0.0, "boxed", "brackets"),
    ("1000,99", "1000.99", 1.0, "bare", "number"),  # decimal comma
    ("1,000", "1000", 1.0, "bare", "number"),  # one comma then three digits: thousands
    ("1 000", "1000", 1.0, "bare", "identical"),  # after localisation
    ("Il a payé 12,50 € au total.", "12.5", 1.0, "prose", "number"),
    ("Elle a 1 200,50 € d'économies.", "1200.5", 1.0, "prose", "number"),
    ("15 pct", "15\\%", 1.0, "bare", "identical"),
    ("15 pct", "0.15", 1.0, "bare", "math_verify"),
    ("\\boxed{0.5}", "50", 0.0, "boxed", "number"),  # percent only when one side carries %
    ("\\boxed{1.4142}", "\\sqrt{2}", 1.0, "boxed", "tolerance"),  # 4 significant digits
    ("\\boxed{1.41}", "\\sqrt{2}", 0.0, "boxed", "tolerance"),
    ("\\boxed{(B) 42}", "\\text{(B)}", 1.0, "boxed", "choice"),
    ("\\boxed{\\text{teas}}", "\\text{east}", 0.0, "boxed", "word"),
    ("\\boxed{40}", "40_9", 0.0, "boxed", "base_n"),
    ("\\boxed{x+1=4}", "4", 0.0, "boxed", "equation"),  # only "name = value" unwraps
    ("\\boxed{k = \\frac{1}{3}}", "\\frac13", 1.0, "boxed", "math_verify"),
    ("\\boxed{\\frac{7!}{16}}", "315", 1.0, "boxed", "math_verify"),
    ("So the answer is 7.", "We add: $3 + 4 = 7$, so the total is $\\boxed{7}$.", 1.0, "answer_is", "identical"),
    ("#### 72", "She pays 3 * 24 = 72.\n#### 72", 1.0, "hashes", "identical"),
    ("#### 72.0", "She pays 3 * 24 = 72.\n#### 72", 1.0, "hashes", "number"),
    # list_marker: "4." opens a list item; the last value stated is 8.
    ("1. Multiply 8 by itself.\n2. Then add the height.\n4. Since we fill", "4", 0.0, "prose", "number"),
    # unevaluated: the question restated in plain text; the last number is 61.
    ("5 - 61 is a mix of a decimal and a fraction.", "-56", 0.0, "last_number", "number"),
    ("Answer \\( (9+1) \\)", "10", 1.0, "prose", "math_verify"),
    ("Final Answer: The largest $n$ is 34.", "34", 1.0, "answer_is", "identical"),
    ("\\boxed{-2} \\quad \\text{and} \\quad \\boxed{1}", "1, -2", 1.0, "boxed", "math_verify"),
    ("so \\boxed{1} then \\boxed{2}", "2", 1.0, "boxed", "identical"),
    ("\\boxed{200} and later \\boxed{255}. Final Answer: The final answer is $10,455$.", "10455", 1.0, "answer_is", "number"),
    ("1.22", "1,22", 1.0, "bare", "number"),
    ("AZYUK2A", "2", 0.0, "none", ""),
]


@pytest.mark.parametrize(("response", "gold", "reward", "route", "policy"), CASES)
def test_policy_and_route_are_named_in_the_detail(response, gold, reward, route, policy):
    verdict = score_math(response, MathParams(gold=gold))
    assert verdict.reward == reward, verdict.detail
    assert verdict.detail.startswith(f"route={route};"), verdict.detail
    if policy:
        assert f"policy={policy};" in verdict.detail, verdict.detail


def test_last_number_is_the_route_only_when_nothing_else_reads():
    verdict = score_math("no formula here, only words and then 17 apples, 12 pears", MathParams(gold="12"))
    assert verdict.detail.split(";")[0] in ("route=prose", "route=last_number")
    missing = score_math("no number at all", MathParams(gold="12"))
    assert (missing.outcome, missing.detail.split(";")[0]) == ("parse_error", "route=none")
    strict = score_math("I got 3 then 17.", MathParams(gold="17", strictness="answer"))
    assert strict.outcome == "parse_error"


def test_a_gold_is_read_once_per_process_for_a_group():
    _gold.cache_clear()
    for k in range(16):
        score_math(f"\\boxed{{{k}}}", MathParams(gold="\\frac{1}{2} + \\frac{\\sqrt{3}}{2}"))
    info = _gold.cache_info()
    assert (info.misses, info.hits) == (1, 15)


def test_a_gold_with_no_answer_is_a_parse_error_naming_the_gold():
    verdict = score_math("\\boxed{1}", MathParams(gold="no answer in this gold at all"))
    assert verdict.outcome == "parse_error" and "gold" in verdict.detail


# --- the outsider's misses (issue 33) -------------------------------------------------------------
def _math(response: str, gold: str):
    from rlvr.verify.math.scorer import MathParams, score_math

    return score_math(response, MathParams(gold=gold))


@pytest.mark.parametrize("response, gold, right", [
    ("\\boxed{\\begin{pmatrix} 0.3333 \\\\ 0.5 \\end{pmatrix}}", "\\begin{pmatrix} \\frac{1}{3} \\\\ \\frac{1}{2} \\end{pmatrix}", True),
    ("\\boxed{(0.3333, 0.5)}", "\\left(\\frac{1}{3}, \\frac{1}{2}\\right)", True),
    ("\\boxed{[0.3333, 2]}", "\\left[\\frac{1}{3}, 2\\right]", True),
    ("\\boxed{(0.3350, 0.5)}", "\\left(\\frac{1}{3}, \\frac{1}{2}\\right)", False),  # off in the 3rd digit
    ("\\boxed{(0.33, 0.5)}", "\\left(\\frac{1}{3}, \\frac{1}{2}\\right)", False),  # too few digits to be a value
    ("\\boxed{(0.3333, 2)}", "\\left[\\frac{1}{3}, 2\\right]", False),  # an open end for a closed one
    ("\\boxed{(0.3333, 0.5, 1)}", "\\left(\\frac{1}{3}, \\frac{1}{2}\\right)", False),
])
def test_decimals_against_exact_values_inside_a_matrix_tuple_or_interval(response, gold, right):
    v = _math(response, gold)
    assert (v.outcome == "ok") is right, v.detail


@pytest.mark.parametrize("response, gold, right", [
    ("so $y_1 = \\boxed{2}$ and $y_2 = \\boxed{3}$", "2, 3", True),
    ("so $y_1 = \\boxed{2}$ and $y_2 = \\boxed{3}$", "y_1 = 2, y_2 = 3", True),
    ("so $y_1 = \\boxed{2}$ and $y_2 = \\boxed{4}$", "2, 3", False),
    ("first \\boxed{2}. Then the answer is $x = \\boxed{3}$", "3", True),  # a full stop: a new statement
])
def test_an_answer_boxed_in_labelled_parts(response, gold, right):
    v = _math(response, gold)
    assert (v.outcome == "ok") is right, v.detail


@pytest.mark.parametrize("response, gold, right", [
    ("The clock shows \\boxed{1:00}", "12:00", False),  # math-verify: 1/0 == 12/0
    ("The clock shows \\boxed{12:00}", "12:00", True),
    ("\\boxed{01:30}", "1:30", True),
    ("\\boxed{1:30 p.m.}", "1:30 pm", True),
    ("\\boxed{1:30 am}", "1:30 pm", False),
])
def test_times_of_day_compare_as_times(response, gold, right):
    v = _math(response, gold)
    assert (v.outcome == "ok") is right, v.detail


@pytest.mark.parametrize("response, gold, right", [
    ("\\boxed{\\mathrm{E}*2}", "E", False),  # an expression, not the choice E
    ("\\boxed{E = mc^2}", "E", False),
    ("\\boxed{\\text{(E)}}", "E", True),
    ("\\boxed{E}", "(E)", True),
    ("(B) 42", "B", True),
])
def test_a_choice_letter_must_stand_alone(response, gold, right):
    v = _math(response, gold)
    assert (v.outcome == "ok") is right, v.detail
