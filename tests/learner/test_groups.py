"""Group assembly and the filters: every drop is counted under its reason."""

from __future__ import annotations

from rlvr.learner.custody.groups import DropCounter, GroupAssembler, filter_group
from tests.factories import make_scored


def _group(rewards, version=0, outcomes=None, k=0):
    asm = GroupAssembler(group_timeout_s=60)
    group = None
    for i, r in enumerate(rewards):
        outcome = (outcomes or ["ok"] * len(rewards))[i]
        group = asm.add(i + 1, make_scored(k=k, i=i, reward=r, n=len(rewards), version=version, outcome=outcome))
    return group


def _filter(group, current=0, staleness=1, dynamic=True):
    return filter_group(group, current_version=current, max_staleness=staleness, dynamic_sampling=dynamic,
                        zero_variance_eps=1e-6)


def test_group_completes_at_n_samples_in_any_order():
    asm = GroupAssembler(group_timeout_s=60)
    assert asm.add(3, make_scored(i=2, n=3)) is None
    assert asm.add(1, make_scored(i=0, n=3)) is None
    group = asm.add(2, make_scored(i=1, n=3))
    assert group is not None and [sc.sample.sample_index for _, sc in group.members] == [0, 1, 2]
    assert not asm.open


def test_duplicate_sample_is_ignored_once_seen():
    asm = GroupAssembler(group_timeout_s=60)
    asm.add(1, make_scored(i=0, n=2))
    assert asm.add(5, make_scored(i=0, n=2)) is None and asm.duplicates == 1


def test_zero_variance_group_is_dropped_by_dynamic_sampling():
    result = _filter(_group([1.0, 1.0, 1.0, 1.0]))
    assert not result.kept and {r for *_, r in result.dropped} == {"zero_variance"}
    drops = DropCounter()
    drops.count(result)
    assert drops.samples["zero_variance"] == 4 and drops.groups["zero_variance"] == 1


def test_zero_variance_group_is_kept_without_dynamic_sampling():
    assert len(_filter(_group([0.0, 0.0]), dynamic=False).kept) == 2


def test_informative_group_is_kept():
    result = _filter(_group([1.0, 0.0, 0.0, 1.0]))
    assert len(result.kept) == 4 and not result.dropped


def test_stale_samples_are_dropped_beyond_max_staleness():
    ok = _filter(_group([1.0, 0.0], version=3), current=4, staleness=1)
    assert len(ok.kept) == 2
    stale = _filter(_group([1.0, 0.0], version=2), current=4, staleness=1)
    assert not stale.kept and {r for *_, r in stale.dropped} == {"stale"}


def test_failed_verification_drops_the_sample_and_keeps_the_rest():
    result = _filter(_group([1.0, 0.0, 0.0, 1.0], outcomes=["ok", "timeout", "wrong", "ok"]))
    assert len(result.kept) == 3
    assert [r for *_, r in result.dropped] == ["verify_failed"]


def test_a_group_left_with_one_sample_is_dropped_as_partial():
    result = _filter(_group([1.0, 0.0, 0.0], outcomes=["ok", "timeout", "sandbox_error"]))
    assert not result.kept
    assert sorted(r for *_, r in result.dropped) == ["partial", "verify_failed", "verify_failed"]


def test_incomplete_group_expires_as_partial():
    asm = GroupAssembler(group_timeout_s=10)
    asm.add(1, make_scored(i=0, n=4), now=100.0)
    assert asm.expire(now=105.0) == []
    expired = asm.expire(now=111.0)
    assert len(expired) == 1 and len(expired[0].members) == 1 and not asm.open


# --- numbers that cannot poison the step (issue 12, confirmed defect 1) -------------------

import math  # noqa: E402

import msgspec  # noqa: E402
import pytest  # noqa: E402

from rlvr.protocol import Completion  # noqa: E402


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_reward_is_dropped_as_invalid_and_never_reaches_the_group_std(bad):
    # Regression: statistics.pstdev raised on a NaN reward, the learner died, and
    # the replayed group killed it again after every restart.
    result = _filter(_group([1.0, bad, 0.0, 1.0]))
    assert [r for *_, r in result.dropped] == ["invalid"]
    assert len(result.kept) == 3 and all(math.isfinite(sc.verdict.reward) for _, sc in result.kept)
    drops = DropCounter()
    drops.count(result)
    assert drops.as_dict()["drop_invalid"] == 1


def test_a_group_of_nan_rewards_is_dropped_whole_without_raising():
    result = _filter(_group([math.nan, math.nan]))
    assert not result.kept and sorted(r for *_, r in result.dropped) == ["invalid", "invalid"]


def _with(sc, **sample):
    return msgspec.structs.replace(sc, sample=msgspec.structs.replace(sc.sample, **sample))


@pytest.mark.parametrize(
    "poison",
    [
        lambda sc: msgspec.structs.replace(sc, verdict=msgspec.structs.replace(sc.verdict, components={"accuracy": math.nan})),
        lambda sc: _with(sc, completion=Completion(ids=[5, 6], logprobs=[-0.1])),
        lambda sc: _with(sc, group_size=3),
    ],
    ids=["nan_component", "lengths_disagree", "other_group_size"],
)
def test_an_unusable_sample_is_dropped_as_invalid_and_the_rest_of_its_group_is_kept(poison):
    # A token's range (an infinite log-prob, a negative id) is the schema's: such a
    # Scored never decodes, so it never reaches a group (tests/actors/test_poison_learner.py).
    asm = GroupAssembler(group_timeout_s=60)
    members = [make_scored(i=i, reward=float(i % 2), n=4) for i in range(4)]
    members[2] = poison(members[2])
    group = None
    for seq, sc in enumerate(members, 1):
        group = asm.add(seq, sc) or group
    assert group is not None
    result = _filter(group)
    assert [(seq, r) for seq, _, r in result.dropped] == [(3, "invalid")] and len(result.kept) == 3


def test_a_closed_group_forgets_its_ids_so_the_assembler_stays_bounded():
    asm = GroupAssembler(group_timeout_s=60)
    for i in range(2):
        asm.add(i + 1, make_scored(i=i, n=2))
    asm.add(3, make_scored(k=1, i=0, n=2))
    assert asm.seen == {"t-t1/0"}
    assert asm.expire(now=1e12) and not asm.seen


class _Mono:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_group_replayed_after_a_restart_keeps_its_age_on_the_stream():
    """A restarted learner replays a partial group stored long ago: its age is the stream's,
    so it expires once the stream has moved past the timeout, not a full timeout later."""
    from rlvr.learner.custody.groups import StreamClock

    mono = _Mono()
    asm = GroupAssembler(group_timeout_s=12, clock=StreamClock(mono))
    asm.clock.saw(5_000.0)  # a survivor of a group cut in two, stored at 5000
    asm.add(7, make_scored(i=2, n=4))
    asm.clock.saw(5_020.0)  # the next message read was stored 20 s later
    assert [g.group_id for g in asm.expire()] == [make_scored(i=2, n=4).sample.group_id]


def test_a_fast_replay_completes_groups_stored_close_together():
    """Replaying an hour-old stream in a second moves the clock with the messages: a group
    whose members were stored 5 s apart completes, whatever the wall clock says."""
    from rlvr.learner.custody.groups import StreamClock

    mono = _Mono()
    asm = GroupAssembler(group_timeout_s=12, clock=StreamClock(mono))
    for i, stored in enumerate((1_000.0, 1_002.0, 1_004.0, 1_005.0)):
        asm.clock.saw(stored)
        mono.t += 0.01
        assert asm.expire() == []
        group = asm.add(i + 1, make_scored(i=i, n=4))
    assert group is not None and len(group.members) == 4


def test_the_stream_clock_runs_on_while_nothing_is_delivered():
    from rlvr.learner.custody.groups import StreamClock

    mono = _Mono()
    clock = StreamClock(mono)
    clock.saw(500.0)
    mono.t += 30.0
    assert clock.now() == 530.0
    assert clock.saw(510.0) == 530.0  # an older message never turns the clock back
