"""exact and regex: hand-computed verdicts."""

import pytest

from rlvr.protocol.tasks import VerifierSpec
from rlvr.verify.registry import resolve


def verdict(name, params, text):
    return resolve(VerifierSpec(name=name, params=params))(text)


@pytest.mark.parametrize(
    ("params", "text", "reward"),
    [
        ({"gold": "Paris"}, "  paris \n", 1.0),  # strip + case-insensitive by default
        ({"gold": "Paris", "ignore_case": False}, "paris", 0.0),
        ({"gold": "New  York"}, "new\tyork", 1.0),  # whitespace collapsed
        ({"gold": "New York", "collapse_whitespace": False}, "New  York", 0.0),
        ({"gold": "42", "strip_chars": "."}, "42.", 1.0),
        ({"gold": "42"}, "42.", 0.0),
        ({"gold": ["B", "(B)"]}, "(b)", 1.0),  # several acceptable answers
        ({"gold": "72", "after": "####"}, "so 3*24 = 72\n#### 72\n", 1.0),
        ({"gold": "72", "after": "####"}, "#### 71\nlater #### 72", 1.0),  # the last marker counts
        ({"gold": "72", "after": "The answer is"}, "The answer is 72\nbye", 1.0),  # first line only
        ({"gold": "72", "after": "is", "first_line": False}, "is 72\nbye", 0.0),
        ({"gold": "C", "after": "<answer>", "before": "</answer>"}, "<answer> c </answer>", 1.0),
    ],
)
def test_exact(params, text, reward):
    v = verdict("exact", params, text)
    assert v.reward == reward
    assert v.outcome == ("ok" if reward else "wrong")


def test_exact_reports_the_normalised_extraction():
    v = verdict("exact", {"gold": "72", "after": "####"}, "blah\n####   72  ")
    assert v.extracted == "72"


def test_exact_missing_marker_is_a_parse_error_not_wrong():
    v = verdict("exact", {"gold": "72", "after": "####"}, "the answer is 72")
    assert (v.reward, v.outcome, v.extracted) == (0.0, "parse_error", None)
    assert "####" in v.detail


@pytest.mark.parametrize(
    ("params", "text", "reward", "extracted"),
    [
        ({"pattern": r"\d+"}, "the year 1999 was", 1.0, "1999"),  # search: partial match
        ({"pattern": r"\d+", "mode": "full"}, "the year 1999", 0.0, None),
        ({"pattern": r"\d+", "mode": "full"}, "  1999\n", 1.0, "1999"),  # full match on the stripped text
        ({"pattern": r"answer: (?P<answer>[A-D])"}, "so, answer: C.", 1.0, "C"),
        ({"pattern": r"ANSWER"}, "answer", 0.0, None),
        ({"pattern": r"ANSWER", "ignore_case": True}, "answer", 1.0, "answer"),
        ({"pattern": r"a.b", "mode": "full"}, "a\nb", 0.0, None),
        ({"pattern": r"a.b", "mode": "full", "dotall": True}, "a\nb", 1.0, "a\nb"),
        ({"pattern": r"^b$"}, "a\nb", 0.0, None),
        ({"pattern": r"^b$", "multiline": True}, "a\nb", 1.0, "b"),
    ],
)
def test_regex(params, text, reward, extracted):
    v = verdict("regex", params, text)
    assert (v.reward, v.outcome, v.extracted) == (reward, "ok" if reward else "wrong", extracted)
