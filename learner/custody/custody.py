"""Custody: one owner for every sample's fate in the learner, from SCORED to the checkpoint.

A scored sample the learner receives is, in order:

1. **received** (``receive``): new, so the ledger marks it pending and the
   learner holds its message (``Hold``: the consumer keeps it alive); or
   already decided (committed, settled, a late duplicate: ack it), or a
   redelivery of the copy held (hold it again), or a second copy of a pending
   sample (counted ``duplicate``, acked);
2. **settled**, exactly once, by one of
   - ``train(ids)``: in an optimizer step;
   - ``drop(sample_id, reason)``: filtered out (stale, zero variance,
     invalid...), counted by reason;
   - ``expire(group)``: its group never completed (``partial``);
   - ``evaluated(ids)``: an evaluation sample, scored and done;
3. **committed** (``commit``): the next checkpoint stores its fate (the
   ledger entry lists trained and dropped ids) and moves the replay floor.

Every transition returns the stream sequences whose messages may now be
acked (``Consumer.release``): acks only bound what JetStream redelivers, the
checkpoint is what makes a fate final (``rlvr.learner.custody.ledger``). The run
totals the summary and heartbeats show (drops by reason, verifier outcomes
of training samples) are counted here too, in the same transitions, so
"received" always equals trained + dropped + pending.

Pure: no NATS, no torch; ``tests/learner/test_custody.py`` drives it alone.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from opentelemetry.trace import SpanContext

from rlvr.learner.custody.checkpoint import LedgerEntry
from rlvr.learner.custody.groups import DropCounter, FilterResult, Group
from rlvr.learner.custody.ledger import Ledger, LedgerState
from rlvr.protocol import Scored

Receipt = Literal["new", "held_again", "decided", "duplicate"]


class Custody:
    def __init__(self, ledger: Ledger | None = None, *, drops: dict[str, int] | None = None,
                 outcomes: dict[str, int] | None = None) -> None:
        self.ledger = ledger or Ledger()
        self.drops = DropCounter()
        self.drops.samples.update(drops or {})
        # Verifier outcomes of every training sample settled (kept or dropped), run totals.
        self.outcomes: Counter[str] = Counter(outcomes or {})
        self.held: dict[str, int] = {}  # sample id -> stream seq of the message held for it
        self.spans: dict[str, SpanContext] = {}  # sample id -> its trajectory's span (the step links it)
        # Fates since the last commit: the next ledger entry.
        self.trained: list[str] = []
        self.dropped: dict[str, str] = {}

    @classmethod
    def restored(cls, state: LedgerState, drops: dict[str, int], outcomes: dict[str, int]) -> Custody:
        return cls(Ledger(state), drops=drops, outcomes=outcomes)

    # --- arrival -------------------------------------------------------------------
    def receive(self, sample_id: str, seq: int, span: SpanContext | None = None) -> Receipt:
        """What to do with the message at ``seq``: ``new`` and ``held_again``
        are held (``Hold``); ``decided`` and ``duplicate`` are acked now."""
        ledger = self.ledger
        if ledger.already_consumed(sample_id, seq) or sample_id in ledger.settled_uncommitted:
            return "decided"  # before a restart, or earlier in this one
        if sample_id in ledger.pending:
            if ledger.pending[sample_id] == seq:
                return "held_again"  # a redelivery of the message we hold
            self.drops.samples["duplicate"] += 1
            return "duplicate"  # the same sample published twice: one copy is enough
        ledger.received(sample_id, seq)
        self.held[sample_id] = seq
        if span is not None:
            self.spans[sample_id] = span
        return "new"

    # --- fates ---------------------------------------------------------------------
    def train(self, ids: list[str]) -> list[int]:
        """``ids`` went into an optimizer step."""
        self.trained += ids
        return [seq for sid in ids if (seq := self._settle(sid)) is not None]

    def drop(self, sample_id: str, reason: str) -> list[int]:
        """``sample_id`` will never be trained, for ``reason`` (counted)."""
        self.dropped[sample_id] = reason
        self.drops.samples[reason] += 1
        seq = self._settle(sample_id)
        return [] if seq is None else [seq]

    def filtered(self, group: Group, result: FilterResult) -> list[int]:
        """A complete training group went through the filters: settle what they
        dropped (the kept samples wait for ``train``); count its outcomes."""
        self.outcomes.update(sc.verdict.outcome for _, sc in group.members)
        reasons = Counter(reason for _, _, reason in result.dropped)
        if not result.kept and reasons:
            self.drops.groups[reasons.most_common(1)[0][0]] += 1
        return [seq for _, sc, reason in result.dropped for seq in self.drop(sc.sample_id, reason)]

    def expire(self, group: Group) -> list[int]:
        """``group`` did not complete in time: every member dropped as ``partial``.
        An evaluation group's samples are settled without a ledger fate (they never train)."""
        self.drops.groups["partial"] += 1
        if group.purpose != "train":
            self.drops.samples["partial"] += len(group.members)
            return self.evaluated([sc.sample_id for _, sc in group.members])
        self.outcomes.update(sc.verdict.outcome for _, sc in group.members)
        return [seq for _, sc in group.members for seq in self.drop(sc.sample_id, "partial")]

    def evaluated(self, ids: list[str]) -> list[int]:
        """Evaluation samples, scored and counted by the evaluator: done."""
        return [seq for sid in ids if (seq := self._settle(sid)) is not None]

    def lost(self, count: int, reason: str) -> None:
        """``count`` samples that never reached this learner (``retention_gap``): counted, no ids."""
        self.drops.samples[reason] += count

    def _settle(self, sample_id: str) -> int | None:
        if sample_id in self.ledger.pending:
            self.ledger.settle(sample_id)
        self.spans.pop(sample_id, None)  # the step span has taken its link already
        return self.held.pop(sample_id, None)

    # --- commit --------------------------------------------------------------------
    def commit(self, step: int) -> tuple[LedgerState, LedgerEntry]:
        """The ledger state and entry the next checkpoint stores; starts a new entry."""
        state, _ = self.ledger.commit()
        entry = LedgerEntry(step, self.trained, self.dropped)
        self.trained, self.dropped = [], {}
        return state, entry

    # --- what the summary and heartbeats show ----------------------------------------
    @property
    def late_duplicates(self) -> int:
        return self.ledger.late_duplicates

    def pending(self) -> int:
        """Received and not yet settled: in a group being assembled or a batch not yet trained."""
        return len(self.ledger.pending)

    def accounting(self, samples_trained: int) -> dict[str, int]:
        """Every sample received, by fate: ``scored`` = trained + dropped + in flight
        (copies of a sample, ``duplicate`` and ``late_duplicate``, are counted apart)."""
        copies = ("duplicate", "late_duplicate")
        dropped = sum(v for k, v in self.drops.samples.items() if k not in copies)
        pending = self.pending()
        return {"scored": samples_trained + dropped + pending, "trained": samples_trained, "dropped": dropped,
                "in_flight": pending, "copies": self.drops.samples.get("duplicate", 0) + self.late_duplicates}

    def drop_totals(self) -> dict[str, int]:
        return {**self.drops.samples, "late_duplicate": self.ledger.late_duplicates}


def span_links(custody: Custody, scored: list[Scored]) -> list[SpanContext]:
    """The span contexts of ``scored`` that custody knows (the step span links them)."""
    return [c for sc in scored if (c := custody.spans.get(sc.sample_id)) is not None]


__all__ = ["Custody", "Receipt", "span_links"]
