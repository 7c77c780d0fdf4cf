"""The ledger: what a checkpoint commits, and where a restart resumes."""

from __future__ import annotations

from rlvr.learner.ledger import Ledger


def test_floor_stays_below_the_oldest_unsettled_sample():
    led = Ledger()
    for seq, sid in enumerate(["a", "b", "c", "d"], start=1):
        led.received(sid, seq)
    led.settle("b")
    led.settle("d")
    state, consumed = led.commit()
    assert state.floor == 1  # "a" is still pending
    assert set(consumed) == {"b", "d"} and set(state.settled) == {"b", "d"}
    assert led.already_consumed("b", 2) and not led.already_consumed("a", 1)


def test_floor_advances_and_forgets_ids_below_it():
    led = Ledger()
    for seq, sid in enumerate(["a", "b", "c"], start=1):
        led.received(sid, seq)
    for sid in ("a", "b", "c"):
        led.settle(sid)
    state, _ = led.commit()
    assert state.floor == 4 and state.settled == {}
    assert led.already_consumed("zz", 3)  # anything below the floor


def test_settled_but_uncommitted_samples_are_replayed_after_a_crash():
    led = Ledger()
    led.received("a", 1)
    led.received("b", 2)
    led.settle("a")
    committed, _ = led.commit()
    led.settle("b")  # trained, but the process dies before the next commit
    restarted = Ledger(committed)
    assert restarted.already_consumed("a", 1)
    assert not restarted.already_consumed("b", 2)
    assert committed.floor == 2
