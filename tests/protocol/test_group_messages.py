"""SampleGroup and ScoredGroup: one message per task on ROLLOUTS and SCORED."""

from __future__ import annotations

import math

import msgspec
import pytest

from rlvr.protocol import SampleGroup, ScoredGroup, Verdict, decode, encode
from rlvr.protocol.groups import group_rank, scored_group_msg_id
from rlvr.protocol.validate import MessageInvalidError, check_message
from tests.factories import make_sample


def _samples(n: int = 4, k: int = 0):
    return [make_sample(k=k, i=i, n=n) for i in range(n)]


def _scored(verdicts=None, n: int = 4) -> ScoredGroup:
    samples = _samples(n)
    return ScoredGroup("t", "t-t0", samples, verdicts or [Verdict(float(i % 2), "ok", "exact") for i in range(n)])


def test_a_group_round_trips_and_validates():
    g = SampleGroup("t", "t-t0", _samples())
    back = decode(encode(g), SampleGroup)
    check_message(back)
    assert back == g and back.msg_id == "t-t0/group"
    sg = decode(encode(_scored()), ScoredGroup)
    check_message(sg)
    assert [sc.sample_id for sc in sg.items()] == [f"t-t0/{i}" for i in range(4)]


@pytest.mark.parametrize("samples, reason", [
    ([], "samples is empty"),
    (_samples()[:3], "holds 3 samples of a group of 4"),
    ([_samples()[1], _samples()[0], *_samples()[2:]], "come in order"),
    ([*_samples()[:3], make_sample(k=9, i=3, n=4)], "task 't-t9'"),
])
def test_an_incomplete_or_mixed_group_is_refused_naming_what_is_wrong(samples, reason):
    with pytest.raises(MessageInvalidError, match=reason):
        check_message(SampleGroup("t", "t-t0", samples))


def test_a_bad_member_is_named_by_its_place_in_the_group():
    samples = _samples()
    samples[2] = msgspec.structs.replace(samples[2], policy_version=3, policy_version_max=1)
    with pytest.raises(MessageInvalidError, match=r"samples\[2\]\.policy_version_max"):
        check_message(SampleGroup("t", "t-t0", samples))


def test_a_scored_group_needs_one_finite_verdict_per_sample():
    with pytest.raises(MessageInvalidError, match="3 verdicts for 4 samples"):
        check_message(_scored([Verdict(1.0, "ok", "exact")] * 3))
    with pytest.raises(MessageInvalidError, match=r"verdicts\[1\]\.reward"):
        check_message(_scored([Verdict(1.0, "ok", "exact"), Verdict(math.nan, "ok", "exact")] * 2))


def test_scorings_that_agree_share_an_id_and_a_rank_and_any_other_verdict_changes_both():
    a = _scored([Verdict(1.0, "ok", "exact", latency_s=0.1)] * 4)
    b = _scored([Verdict(1.0, "ok", "exact", latency_s=0.7)] * 4)  # latency aside, the same scoring
    c = _scored([Verdict(1.0, "ok", "exact")] * 3 + [Verdict(0.0, "timeout", "exact")])
    assert scored_group_msg_id(a) == scored_group_msg_id(b) != scored_group_msg_id(c)
    assert group_rank(a) == group_rank(b) != group_rank(c)
    assert group_rank(a)[:8] == group_rank(c)[:8]  # the same task's group: the same meaning
