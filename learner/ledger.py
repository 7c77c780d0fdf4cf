"""Which scored samples are settled, and where to resume after a crash.

A sample is *settled* once the learner is done with it for good: trained in
an optimizer step, or dropped on purpose (counted). Settled is not yet
*consumed*: that happens at the next checkpoint, which stores

- ``floor``: every SCORED message with a stream sequence below it is settled;
- ``settled``: the ids (with their sequences) of settled samples at or
  above the floor (samples arrive out of order, so the floor lags).

Only then are the JetStream messages acked. After a crash the learner
recreates its consumer at ``floor`` and skips the ids in ``settled``: every
sample that was in hand, in a half-built group or in an uncommitted step, is
replayed, and none is trained twice.
"""

from __future__ import annotations

import msgspec


class LedgerState(msgspec.Struct):
    floor: int = 1
    settled: dict[str, int] = {}  # sample id -> stream sequence, all >= floor


class Ledger:
    def __init__(self, state: LedgerState | None = None) -> None:
        state = state or LedgerState()
        self.floor = state.floor
        self.committed: dict[str, int] = dict(state.settled)
        self.pending: dict[str, int] = {}  # received, not settled
        self.settled_uncommitted: dict[str, int] = {}
        self.max_seq = state.floor - 1

    def already_consumed(self, sample_id: str, seq: int) -> bool:
        return seq < self.floor or sample_id in self.committed

    def received(self, sample_id: str, seq: int) -> None:
        self.pending[sample_id] = seq
        self.max_seq = max(self.max_seq, seq)

    def settle(self, sample_id: str) -> None:
        seq = self.pending.pop(sample_id)
        self.settled_uncommitted[sample_id] = seq

    def commit(self) -> tuple[LedgerState, list[str]]:
        """Fold settled samples into a new checkpointable state; return it and
        the ids that became consumed (to ack)."""
        newly = list(self.settled_uncommitted)
        self.committed.update(self.settled_uncommitted)
        self.settled_uncommitted.clear()
        # Uncommitted settled samples count as pending for the floor: a crash
        # before the next checkpoint must replay them.
        floor = min(self.pending.values(), default=self.max_seq + 1)
        self.floor = max(self.floor, floor)
        self.committed = {sid: seq for sid, seq in self.committed.items() if seq >= self.floor}
        return LedgerState(self.floor, dict(self.committed)), newly
