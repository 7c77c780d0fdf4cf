"""composite: weighted sums, components, outcome precedence, overlong shaping."""

import math

import pytest

from rlvr.protocol.samples import Verdict
from rlvr.protocol.tasks import VerifierSpec
from rlvr.verify.registry import Verifier, VerifierSpecError, VerifyContext, load_plugins, resolve
from rlvr.verify.simple import ExactParams

GOOD = "<think>6*7</think><answer>42</answer>"
ANSWER = {"name": "exact", "params": {"gold": "42", "after": "<answer>", "before": "</answer>"}}


def score(params, text, tokens=None):
    return resolve(VerifierSpec(name="composite", params=params))(text, VerifyContext(completion_tokens=tokens))


def test_default_weights_accuracy_one_format_point_two():
    v = score({"parts": [ANSWER, {"name": "format"}]}, GOOD)
    assert v.reward == pytest.approx(1.2)
    assert v.components == {"accuracy": 1.0, "format": 1.0}
    assert (v.outcome, v.extracted, v.verifier) == ("ok", "42", "composite")


def test_wrong_answer_good_format_gets_the_format_part_only():
    v = score({"parts": [ANSWER, {"name": "format"}]}, GOOD.replace("42", "41"))
    assert v.reward == pytest.approx(0.2)
    assert v.components == {"accuracy": 0.0, "format": 1.0}
    assert v.outcome == "wrong"


def test_right_answer_bad_format_keeps_the_accuracy_outcome():
    v = score({"parts": [ANSWER, {"name": "format"}]}, "hmm <think>x</think><answer>42</answer>")
    assert v.reward == pytest.approx(1.0)
    assert v.outcome == "ok"
    assert "format: text before <think>" in v.detail


def test_explicit_weights_and_component_names():
    parts = [dict(ANSWER, weight=2.0), {"name": "format", "weight": 0.5, "component": "tags"}]
    v = score({"parts": parts}, GOOD)
    assert v.reward == pytest.approx(2.5)
    assert v.components == {"accuracy": 1.0, "tags": 1.0}


def test_overlong_added_as_a_component():
    params = {"parts": [ANSWER, {"name": "format"}], "overlong": {"max_len": 100, "cache_len": 20}}
    assert score(params, GOOD, tokens=80).components["overlong"] == 0.0
    v = score(params, GOOD, tokens=90)
    assert v.components == {"accuracy": 1.0, "format": 1.0, "overlong": -0.5}
    assert v.reward == pytest.approx(0.7)
    assert score(params, GOOD, tokens=100).reward == pytest.approx(0.2)
    assert score(params, GOOD, tokens=5000).reward == pytest.approx(0.2)


def test_overlong_without_token_count_is_an_error():
    params = {"parts": [ANSWER], "overlong": {"max_len": 100, "cache_len": 20}}
    with pytest.raises(ValueError, match="completion_tokens"):
        score(params, GOOD)


def _fixed(outcome):
    def fn(completion, params, ctx):
        return Verdict(reward=0.5, outcome=outcome, verifier="fixed", detail=outcome)

    return Verifier(f"fixed_{outcome}", ExactParams, fn)


TIMEOUT = _fixed("timeout")
SANDBOX_ERROR = _fixed("sandbox_error")


@pytest.mark.parametrize(("part", "outcome"), [("TIMEOUT", "timeout"), ("SANDBOX_ERROR", "sandbox_error")])
def test_failed_part_outcome_wins_over_accuracy(part, outcome):
    load_plugins([f"{__name__}:{part}"])  # as a verify role does with its [verify] plugins, at start-up
    parts = [ANSWER, {"name": f"{__name__}:{part}", "params": {"gold": ""}, "component": "side"}]
    v = score({"parts": parts}, GOOD)
    assert v.outcome == outcome
    assert v.components == {"accuracy": 1.0, "side": 0.5}
    assert v.reward == pytest.approx(1.5)


def test_spec_errors():
    with pytest.raises(VerifierSpecError, match="composites do not nest"):
        score({"parts": [{"name": "composite", "params": {"parts": []}}]}, GOOD)
    with pytest.raises(VerifierSpecError, match=r"part 0: bad params for 'exact': Object missing required field `gold`"):
        score({"parts": [{"name": "exact"}]}, GOOD)
    with pytest.raises(VerifierSpecError, match="component names must be distinct"):
        score({"parts": [ANSWER, {"name": "format"}, {"name": "format"}]}, GOOD)
    with pytest.raises(VerifierSpecError, match=r"Expected `array` of length >= 1 - at `\$.parts`"):
        score({"parts": []}, GOOD)


@pytest.mark.parametrize("weight", [math.nan, math.inf, -math.inf])
def test_a_non_finite_weight_is_a_spec_error_naming_the_key(weight):
    with pytest.raises(VerifierSpecError, match=r"parts\[1\]\.weight must be a finite number"):
        score({"parts": [ANSWER, {"name": "format", "weight": weight}]}, GOOD)


def test_a_nan_weight_in_toml_is_refused_naming_the_key():
    import msgspec

    params = msgspec.toml.decode(b'[[parts]]\nname = "exact"\nparams = {gold = "5"}\nweight = nan\n')
    with pytest.raises(VerifierSpecError, match=r"parts\[0\]\.weight must be a finite number, got nan"):
        resolve(VerifierSpec("composite", params))
