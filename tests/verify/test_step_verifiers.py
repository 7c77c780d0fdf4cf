"""Step verifiers (verify/steps.py): which steps hold, where they end, and the outcome."""

from __future__ import annotations

import pytest

from rlvr.protocol import VerifierSpec
from rlvr.protocol.samples import StepScore
from rlvr.protocol.validate import check_verdict
from rlvr.verify.registry import resolve


def score(name: str, text: str, **params):
    verdict = resolve(VerifierSpec(name, params))(text)
    check_verdict(verdict)  # every verdict a step verifier returns is valid on the wire
    return verdict


def test_each_equation_is_a_step_ending_after_its_result():
    text = "3 + 4 = 7, then 5*6 = 31. So 31."
    v = score("arith_steps", text, gold="30")
    # Two claims, then the answer as a step of its own (text follows the last claim): 31 is not 30.
    assert [(s.ok, text[: s.end][-2:]) for s in v.steps] == [(True, " 7"), (False, "31"), (False, "1.")]
    assert (v.reward, v.outcome, v.extracted) == (0.0, "wrong", "31")
    assert v.components["steps_right"] == pytest.approx(1 / 3)


def test_a_running_chain_checks_each_total_against_the_next_part():
    right = score("arith_steps", "12+34=46+56=102", gold="102", chain="running")
    assert [s.ok for s in right.steps] == [True, True] and right.reward == 1.0 and right.outcome == "ok"
    assert [s.end for s in right.steps] == [8, 15]  # "12+34=46" | "+56=102"
    slip = score("arith_steps", "12+34=47+56=103", gold="102", chain="running")
    # 47+56 is 103, but the last step's result is not the answer: it fails as the answer step.
    assert [s.ok for s in slip.steps] == [False, False] and slip.reward == 0.0
    no_answer = score("arith_steps", "12+34=47+56=103", chain="running")  # no gold: arithmetic only
    assert [s.ok for s in no_answer.steps] == [False, True]
    stopped = score("arith_steps", "12+34=46", gold="102", chain="running")  # stopped after the easy step
    assert [s.ok for s in stopped.steps] == [False] and stopped.reward == 0.0
    plain = score("arith_steps", "12+34=46", gold="102", chain="running", answer_step=False)
    assert [s.ok for s in plain.steps] == [True]  # what a process reward would pay for stopping early
    # Read as plain equalities the same chain is wrong at its first "=" (12+34 is not 46+56): the mode matters.
    assert [s.ok for s in score("arith_steps", "12+34=46+56=102", chain="equal").steps] == [False, True]


def test_lines_markers_and_patterns_group_claims_into_steps():
    text = "a: 2+2=4 and 3*3=9\nno claim here\nb: 10/4=2.5\n"
    assert [s.ok for s in score("arith_steps", text, split="lines").steps] == [True, True]
    text2 = "Step 1: 2+2=5. Step 2: 7-3=4. Answer: 4"
    v = score("arith_steps", text2, split="markers", gold="4")
    assert [s.ok for s in v.steps] == [False, True] and v.reward == 1.0  # the final answer is right
    assert text2[: v.steps[0].end].endswith("2+2=5. ")
    v = score("arith_steps", "<s>1+1=2</s> <s>2+2=5</s>", split="pattern", pattern=r"<s>.*?</s>")
    assert [s.ok for s in v.steps] == [True, False]


def test_partial_credit_is_the_share_of_steps_that_hold():
    v = score("arith_steps", "1+1=2 2+2=5 3+3=6 4+4=8", outcome="steps")  # no gold: no answer step
    assert v.reward == pytest.approx(0.75) and v.outcome == "wrong"
    assert [s.reward for s in v.steps] == [1.0, 0.0, 1.0, 1.0]
    v = score("arith_steps", "1+1=2 2+2=5", step_right=0.5, step_wrong=-1.0)
    assert [s.reward for s in v.steps] == [0.5, -1.0]


@pytest.mark.parametrize("text", ["The year 2024 had 366 days.", "", "x = y", "ratio 3:4"])
def test_no_arithmetic_step_is_a_parse_error_not_a_zero(text):
    v = score("arith_steps", text, gold="1")
    assert v.outcome == "parse_error" and v.steps == []


@pytest.mark.parametrize("text", ["9**99999999=1", "1/0=0", "(" * 40 + "1" + ")" * 40 + "=1", "2+" * 300 + "2=602"])
def test_hostile_arithmetic_is_never_evaluated_past_its_bounds(text):
    v = score("arith_steps", text)
    assert v.outcome in ("parse_error", "ok", "wrong")  # it answers, quickly, without raising


def test_math_steps_checks_each_equation_with_the_math_engine():
    text = "We expand: $x^2 - 1 = (x-1)(x+1)$. Then $(x+1)^2 = x^2 + 1$. So the answer is $\\boxed{2}$."
    v = score("math_steps", text, gold="2")
    assert [s.ok for s in v.steps] == [True, False, True]  # two equations, then the (right) answer
    assert v.outcome == "ok" and v.reward == 1.0 and v.extracted == "2"  # the final answer is the math verifier's
    assert text[: v.steps[0].end].endswith("(x+1)$")
    chain = score("math_steps", "$\\frac{1}{2} + \\frac{1}{3} = \\frac{5}{6} = \\frac{10}{12}$", gold="5/6")
    assert [s.ok for s in chain.steps] == [True]


def test_step_scores_are_typed_and_ordered():
    v = score("arith_steps", "1+1=2\n2+2=4\n", split="lines")
    assert all(isinstance(s, StepScore) for s in v.steps)
    assert [s.end for s in v.steps] == sorted({s.end for s in v.steps})


def test_a_pattern_split_without_a_pattern_names_the_problem():
    from rlvr.verify.registry import VerifierSpecError

    with pytest.raises(VerifierSpecError, match="pattern"):
        resolve(VerifierSpec("arith_steps", {"split": "pattern"}))
