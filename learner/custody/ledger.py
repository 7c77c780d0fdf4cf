"""Which scored samples are settled, and where to resume after a crash.

A sample is *settled* once the learner is done with it for good: trained in
an optimizer step, or dropped on purpose (counted). Settled is not yet
*consumed*: that happens at the next checkpoint, which stores

- ``floor``: every SCORED message with a stream sequence below it is settled;
- ``settled``: the ids (with their sequences) of settled samples at or
  above the floor (samples arrive out of order, so the floor lags);
- ``recent``: the last ``history`` ids settled below the floor, to recognise
  a *late duplicate*: the same sample id published again after JetStream's
  duplicate window (a verifier that stalled past it, say) lands at a new,
  higher sequence. It is not new work: ``already_consumed`` says so, counts
  it (``late_duplicates``) and moves ``max_seq`` past it, so the floor keeps
  advancing instead of waiting for a sample that will never settle.

Only then are the JetStream messages acked. After a crash the learner
recreates its consumer at ``floor`` and skips the ids in ``settled``: every
sample that was in hand, in a half-built group or in an uncommitted step, is
replayed, and none is trained twice.

Limit: a duplicate of an id older than the last ``history`` settled ids is
not recognised; it then forms a group of its own that expires as partial
(counted), so the floor still moves, and it is trained twice only if its
whole group comes back that late. ``history`` bounds what every checkpoint
stores (about 40 bytes an id).
"""

from __future__ import annotations

from collections import OrderedDict

import msgspec

# Settled ids remembered below the floor: at 100 samples/s, over 15 minutes
# of samples, well past the default 600 s duplicate window.
HISTORY = 100_000


class LedgerState(msgspec.Struct):
    floor: int = 1
    settled: dict[str, int] = {}  # sample id -> stream sequence, all >= floor
    recent: dict[str, int] = {}  # settled ids below the floor, oldest first (bounded)
    late_duplicates: int = 0  # run total


class Ledger:
    def __init__(self, state: LedgerState | None = None, *, history: int = HISTORY) -> None:
        state = state or LedgerState()
        self.history = history
        self.floor = state.floor
        self.committed: dict[str, int] = dict(state.settled)
        self.recent: OrderedDict[str, int] = OrderedDict(state.recent)
        self.pending: dict[str, int] = {}  # received, not settled
        self.settled_uncommitted: dict[str, int] = {}
        self.max_seq = state.floor - 1
        self.late_duplicates = state.late_duplicates

    def already_consumed(self, sample_id: str, seq: int) -> bool:
        """True when the message at ``seq`` needs no work: below the floor,
        a replay of a committed sample, or a late duplicate of a settled one
        (counted in ``late_duplicates``). Ack it and do nothing else."""
        if seq < self.floor:
            return True
        known = self.committed.get(sample_id)
        if known is None:
            known = self.recent.get(sample_id)
        if known is None:
            known = self.settled_uncommitted.get(sample_id)
            if known is None or known == seq:
                return False  # new, or a redelivery of the copy settled in this process
        if known != seq:
            self.late_duplicates += 1
            self.max_seq = max(self.max_seq, seq)  # the floor may pass it
        return True

    def is_settled(self, sample_id: str) -> bool:
        """Whether ``sample_id`` was trained or dropped (committed or not), as far as ``history`` reaches."""
        return sample_id in self.committed or sample_id in self.recent or sample_id in self.settled_uncommitted

    def lost_below(self, first_seq: int) -> int:
        """The SCORED messages between the floor and ``first_seq`` (the stream's first now) that no
        committed sample was read from: what retention removed before this learner settled it. One
        message per group (protocol/groups.py): sequences are counted, not samples."""
        if first_seq <= self.floor:
            return 0
        settled = len({seq for seq in self.committed.values() if self.floor <= seq < first_seq})
        return (first_seq - self.floor) - settled

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
        below = sorted((seq, sid) for sid, seq in self.committed.items() if seq < self.floor)
        for seq, sid in below:
            del self.committed[sid]
            self.recent[sid] = seq
        while len(self.recent) > self.history:
            self.recent.popitem(last=False)
        state = LedgerState(self.floor, dict(self.committed), dict(self.recent), self.late_duplicates)
        return state, newly
