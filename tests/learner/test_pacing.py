"""Pacing: tasks in flight that follow the kept share, and short steps only when nothing waits."""

from __future__ import annotations

from rlvr.learner.data.pacing import MAX_OVERSAMPLE, Pacing


def test_without_oversampling_the_limit_stays_whatever_the_filters_drop():
    p = Pacing(32, 32)
    for i in range(64):
        p.filtered(i % 2 == 0)
    assert p.inflight() == 32


def test_oversampling_follows_the_kept_share_and_is_capped():
    p = Pacing(32, 32, oversample=True)
    assert p.inflight() == 32  # nothing seen yet
    for i in range(64):
        p.filtered(i % 5 < 3)  # 60% kept
    assert p.inflight() == round(32 / 0.6)
    for _ in range(64):
        p.filtered(False)  # nothing kept: the cap, never unbounded
    assert p.inflight() == round(32 * MAX_OVERSAMPLE)
    for _ in range(64):
        p.filtered(True)  # everything kept: never below the configured limit
    assert p.inflight() == 32


def test_a_full_batch_always_steps_and_a_short_one_only_above_the_minimum_with_nothing_waiting():
    full_only = Pacing(32, 8)
    assert full_only.step_now(8, waiting_groups=5)
    assert not full_only.step_now(7, waiting_groups=0)  # min_groups_per_step unset: a full batch only
    p = Pacing(32, 8, min_groups_per_step=4)
    assert not p.step_now(3, waiting_groups=0)
    assert not p.step_now(5, waiting_groups=2)  # groups are waiting: take them first
    assert p.step_now(5, waiting_groups=0)


def test_without_refill_a_step_takes_the_next_batch_of_groups_with_what_they_kept_and_never_an_empty_one():
    p = Pacing(32, 4, refill=False)
    kept = 0
    for flat in (False, True, False, True):  # two of four groups carry signal
        assert not p.step_now(kept, waiting_groups=0)
        p.filtered(not flat)
        kept += not flat
    assert p.step_now(kept, waiting_groups=3)  # four filtered: step on the two kept, even with more waiting
    p.stepped()
    for _ in range(4):  # a batch of four flat groups: nothing to train, so no step yet
        p.filtered(False)
        assert not p.step_now(0, waiting_groups=0)
    p.filtered(True)  # the first group with signal: the step goes with it
    assert p.step_now(1, waiting_groups=0)
    assert p.inflight() == 32  # the feeder's pace is that of dynamic sampling off


def test_refill_off_with_oversampling_or_a_minimum_is_a_config_error_naming_the_key():
    import msgspec
    import pytest

    from rlvr.learner.config import LearnConfig

    for key, value in (("oversample", True), ("min_groups_per_step", 4)):
        with pytest.raises(msgspec.ValidationError, match=f"learn.{key}"):
            msgspec.convert({"dynamic_sampling_refill": False, key: value}, LearnConfig)
    assert not msgspec.convert({"dynamic_sampling_refill": False}, LearnConfig).dynamic_sampling_refill
