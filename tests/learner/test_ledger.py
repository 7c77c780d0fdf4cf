"""The ledger: what a checkpoint commits, and where a restart resumes."""

from __future__ import annotations

from rlvr.learner.custody.ledger import Ledger


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


# --- late duplicates past the duplicate window (issue 12, confirmed defect 5) -------------

from rlvr.learner.custody.groups import GroupAssembler  # noqa: E402
from rlvr.learner.custody.ledger import LedgerState  # noqa: E402
from tests.factories import make_scored  # noqa: E402


def _on_scored(led: Ledger, asm: GroupAssembler, sc, seq: int) -> str:
    """What the learner actor does with one SCORED message (learner/actor.py on_scored)."""
    sid = sc.sample_id
    if led.already_consumed(sid, seq) or sid in led.settled_uncommitted:
        return "ack"
    if sid in led.pending:
        return "duplicate"
    led.received(sid, seq)
    group = asm.add(seq, sc)
    if group is not None:
        for _, member in group.members:  # trained (or dropped): settled
            led.settle(member.sample_id)
    return "hold"


def test_a_late_duplicate_of_a_trained_sample_is_acked_counted_and_the_floor_keeps_moving():
    # Regression: the same sample id republished after the 600 s duplicate window
    # lands at a new sequence; the ledger took it for new work, the assembler
    # ignored it as seen, it stayed pending for good and the floor froze there.
    led, asm = Ledger(), GroupAssembler(group_timeout_s=60)
    for seq, i in ((1, 0), (2, 1)):
        assert _on_scored(led, asm, make_scored(k=0, i=i, n=2), seq) == "hold"
    assert led.commit()[0].floor == 3
    assert _on_scored(led, asm, make_scored(k=0, i=1, n=2), 7) == "ack"  # the late copy
    assert led.late_duplicates == 1 and not led.pending
    for seq, i in ((8, 0), (9, 1)):
        _on_scored(led, asm, make_scored(k=1, i=i, n=2), seq)
    state, _ = led.commit()
    assert state.floor == 10 and state.late_duplicates == 1


def test_a_late_duplicate_is_recognised_after_a_restart_from_the_checkpoint():
    led = Ledger()
    led.received("a", 1)
    led.settle("a")
    state, _ = led.commit()
    restarted = Ledger(msgspec_roundtrip(state))
    assert restarted.already_consumed("a", 40) and restarted.late_duplicates == 1
    assert restarted.is_settled("a") and not restarted.is_settled("b")


def test_a_late_duplicate_of_a_settled_but_uncommitted_sample_is_counted():
    led = Ledger()
    led.received("a", 1)
    led.settle("a")
    assert not led.already_consumed("a", 1)  # a redelivery of the copy we settled: the actor acks it
    assert led.already_consumed("a", 5) and led.late_duplicates == 1


def test_the_history_of_settled_ids_is_bounded():
    led = Ledger(history=3)
    for seq in range(1, 11):
        led.received(f"s{seq}", seq)
        led.settle(f"s{seq}")
    state, _ = led.commit()
    assert list(state.recent) == ["s8", "s9", "s10"] and state.floor == 11


def msgspec_roundtrip(state: LedgerState) -> LedgerState:
    import msgspec

    return msgspec.json.decode(msgspec.json.encode(state), type=LedgerState)
