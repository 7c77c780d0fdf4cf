"""Which regex patterns run inline: only those re matches in time linear in the text."""

import re

import pytest

from rlvr.protocol.tasks import VerifierSpec
from rlvr.verify.inline import runs_inline
from rlvr.verify.linear_regex import is_linear
from rlvr.verify.registry import resolve

# Known catastrophic patterns (OWASP's ReDoS examples and their kin): exponential or polynomial
# backtracking on a text that almost matches.
CATASTROPHIC = [
    r"^(a+)+$",
    r"([a-zA-Z]+)*",
    r"(a|aa)+",
    r"(a|a?)+",
    r"(.*a){12}",
    r"^([a-zA-Z0-9])(([\-.]|[_]+)?([a-zA-Z0-9]+))*(@){1}[a-z0-9]+[.]{1}(([a-z]{2,3})|([a-z]{2,3}[.]{1}[a-z]{2,3}))$",
    r"\d+\d+$",  # n^2
    r"(\d+){2}x",  # two unbounded repeats in disguise
    r"(\w+\s?)+$",
]

# Peers' published patterns that are not proven linear: they keep running in a worker.
NOT_PROVEN = [
    r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$",  # TRL's GRPO format reward (two lazy repeats)
    r"(a)\1",  # a back-reference
    r"(?=\d)\d+",  # a look-around
    r"(?>a+)b",  # an atomic group: safe, but not what this module bounds
    r"a++b",  # a possessive repeat: likewise
    r"a{1,5000}",  # more ways than MAX_WAYS to count
    r"\s*(?P<answer>-?\d+)\s*",  # two unbounded repeats: linear in fact (disjoint classes), not proven
]

LINEAR_FULL = [
    r"^-?[0-9]+$",  # the built-in example's format check
    r"^(yes|no)$",
    r"The answer is [A-E]\.?",
    r"(ab|cd){1,3}\w*",
    r"-?(?P<answer>\d+)\.?",
    r".*",
]


@pytest.mark.parametrize("pattern", CATASTROPHIC + NOT_PROVEN)
def test_patterns_that_can_backtrack_or_are_not_bounded_are_not_linear_in_either_mode(pattern):
    assert not is_linear(pattern, 0, search=False)
    assert not is_linear(pattern, 0, search=True)


@pytest.mark.parametrize("pattern", LINEAR_FULL)
def test_one_repeat_of_one_character_and_bounded_choices_are_linear_for_a_full_match(pattern):
    assert is_linear(pattern, 0, search=False)


def test_a_search_with_an_unbounded_repeat_is_not_linear_and_one_without_is():
    # A search retries from every start: \d+x over n digits is n^2 steps.
    assert not is_linear(r"\d+x", 0, search=True)
    assert is_linear(r"\d+x", 0, search=False)
    assert is_linear(r"answer: (?P<answer>[A-D])", 0, search=True)
    assert is_linear(r"#### -?[0-9]", re.IGNORECASE, search=True)


def test_an_invalid_pattern_is_not_linear_rather_than_an_error():
    assert not is_linear("[", 0)
    assert not is_linear("(?P<x>a)(?P<x>b)", 0)


def test_a_linear_pattern_on_a_long_text_that_almost_matches_gives_re_s_own_answer():
    # The shapes the classifier allows, against the worst text for them: long, failing at the end.
    text = "1" * 200_000 + "x"
    for pattern in (r"^-?[0-9]+$", r"-?(?P<answer>\d+)\.?", r".*1"):
        assert is_linear(pattern)
        assert re.fullmatch(pattern, text) is None


def test_which_specs_run_inline_is_decided_by_their_params():
    def inline(name, params):
        return runs_inline(resolve(VerifierSpec(name, params)))

    assert inline("exact", {"gold": "4"}) and inline("random", {})
    assert inline("regex", {"pattern": "^-?[0-9]+$", "mode": "full"})
    assert not inline("regex", {"pattern": "^(a+)+$", "mode": "full"})
    assert not inline("regex", {"pattern": r"\d+x"})  # mode "search" by default
    fmt = {"name": "regex", "params": {"pattern": "^-?[0-9]+$", "mode": "full"}, "component": "format"}
    assert inline("composite", {"parts": [{"name": "exact", "params": {"gold": "4"}}, fmt]})
    assert not inline("composite", {"parts": [{"name": "math", "params": {"gold": "4"}}, fmt]})
    assert not inline("format", {})  # not a candidate: a worker, as before
