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
