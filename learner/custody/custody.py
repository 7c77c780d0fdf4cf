"""Custody: one owner for every sample's fate in the learner, from SCORED to the checkpoint.

A scored sample the learner receives is, in order:

1. **received** (``receive``): new, so the ledger marks it pending and the
   learner holds its message (``Hold``: the consumer keeps it alive); or
   already decided (committed, settled, a late duplicate: ack it), or a
   redelivery of the copy held (hold it again), or a second copy of a pending
   sample (counted ``duplicate``, acked), or a **conflicting** copy: the same
   sample id with other content (another verdict from another verifier
   replica, another prompt or completion), which ``conflict`` settles;
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

Conflicting copies: the learner keeps one by content, never by arrival. Each
copy has a rank (``copy_rank``: a digest of the sample and its verdict, minus
what differs between two scorings of the same thing: timings, the replica);
the lower rank is kept. A copy that arrives while the other waits in an open
group replaces it if its rank is lower; the copy put aside is counted
(``conflicts``, in the summary) and, when the two mean other work (another
prompt, gold or verifier under one id), dead-lettered as ``conflict`` with
the reason; a copy of the same slot with another verdict is acked.
Once a group has gone to a step its members stand: a conflicting copy that
comes later is the one put aside (the reason says so). A copy of a sample
already trained or dropped is a late duplicate (``rlvr.learner.custody.ledger``).

Pure: no NATS, no torch; ``tests/learner/test_custody.py`` drives it alone.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Literal

import msgspec
from opentelemetry.trace import SpanContext

from rlvr.learner.custody.checkpoint import LedgerEntry
from rlvr.learner.custody.groups import DropCounter, FilterResult, Group
from rlvr.learner.custody.ledger import Ledger, LedgerState
from rlvr.protocol import Scored
from rlvr.protocol.samples import sample_meaning

Receipt = Literal["new", "held_again", "decided", "duplicate", "conflict"]


@dataclass
class Intake:
    """What one group message became (``Custody.receive_group``)."""

    joined: list[Scored] = field(default_factory=list)  # new members, for the group assembler
    held: bool = False  # some member is held under the message's seq: hold it
    put_aside: tuple[str, bool] | None = None  # this copy was put aside for a conflict: (why, dead-letter it)
    released: list[tuple[int, str, bool]] = field(default_factory=list)  # other messages now free: (seq, why, dead)
CONFLICT_ERROR = "ConflictingDuplicate"
MEANING_BYTES = 8  # the first bytes of a rank: two copies of one slot share them


def copy_rank(scored: Scored) -> bytes:
    """The rank of one copy of a scored sample; the lower is kept. Equal for copies that are the
    same (the same sample, the same verdict), different otherwise, and the same in every learner
    whatever the order: the digest of the sample's meaning (``sample_meaning``: the slot of the
    task it fills, ``MEANING_BYTES``), then a digest of the sample and its verdict without what
    differs between two scorings of one thing (the verifier's latency, the replica)."""
    meaning = hashlib.blake2b(sample_meaning(scored.sample), digest_size=MEANING_BYTES).digest()
    verdict = msgspec.structs.replace(scored.verdict, latency_s=0.0)
    body = msgspec.msgpack.encode(scored.sample) + msgspec.msgpack.encode(verdict)
    return meaning + hashlib.blake2b(body, digest_size=16).digest()


class Custody:
    def __init__(self, ledger: Ledger | None = None, *, drops: dict[str, int] | None = None,
                 outcomes: dict[str, int] | None = None) -> None:
        self.ledger = ledger or Ledger()
        self.drops = DropCounter()
        self.drops.samples.update(drops or {})
        # Verifier outcomes of every training sample settled (kept or dropped), run totals.
        self.outcomes: Counter[str] = Counter(outcomes or {})
        self.held: dict[str, int] = {}  # sample id -> stream seq of the message held for it
        # Stream seq -> how many held samples it carries: a group message (protocol/groups.py) carries
        # a whole group, and may be acked only once every one of them is settled.
        self._refs: Counter[int] = Counter()
        self.ranks: dict[str, bytes] = {}  # sample id -> rank of the copy held (``copy_rank``)
        self.spans: dict[str, SpanContext] = {}  # sample id -> its trajectory's span (the step links it)
        # Fates since the last commit: the next ledger entry.
        self.trained: list[str] = []
        self.dropped: dict[str, str] = {}

    @classmethod
    def restored(cls, state: LedgerState, drops: dict[str, int], outcomes: dict[str, int]) -> Custody:
        return cls(Ledger(state), drops=drops, outcomes=outcomes)

    # --- arrival -------------------------------------------------------------------
    def receive(self, sample_id: str, seq: int, span: SpanContext | None = None, rank: bytes = b"") -> Receipt:
        """What to do with the message at ``seq`` (``rank``: its ``copy_rank``): ``new`` and
        ``held_again`` are held (``Hold``); ``decided`` and ``duplicate`` are acked now;
        ``conflict`` (other content than the copy held) goes to ``conflict``."""
        ledger = self.ledger
        if ledger.already_consumed(sample_id, seq) or sample_id in ledger.settled_uncommitted:
            return "decided"  # before a restart, or earlier in this one
        if sample_id in ledger.pending:
            if ledger.pending[sample_id] == seq:
                return "held_again"  # a redelivery of the message we hold
            if self.ranks.get(sample_id, b"") != rank:
                return "conflict"
            self.drops.samples["duplicate"] += 1
            return "duplicate"  # the same sample published twice: one copy is enough
        ledger.received(sample_id, seq)
        self.held[sample_id] = seq
        self._refs[seq] += 1
        self.ranks[sample_id] = rank
        if span is not None:
            self.spans[sample_id] = span
        return "new"

    def conflict(self, sample_id: str, seq: int, rank: bytes,
                 replace: Callable[[], int | None]) -> tuple[int | None, str, bool]:
        """Two copies of ``sample_id`` with other content: the one held and the one at ``seq``
        (``receive`` said ``conflict``). The lower rank is kept: the new copy takes the held one's
        place when ``replace()`` could swap it into its group (the group is still open: it returns
        the held copy's seq). Returns the stream seq of the copy put aside (None: the held copy's
        message still carries other held samples of its group, and is settled with them), the reason,
        and whether to dead-letter it: yes when the two mean other work (another prompt, gold or verifier under
        one id); a copy of the same slot with another verdict or completion is acked. Both are
        counted in ``conflicts``."""
        held_seq, held_rank = self.ledger.pending[sample_id], self.ranks.get(sample_id, b"")
        self.drops.samples["conflict"] += 1
        self.ledger.max_seq = max(self.ledger.max_seq, seq)  # the floor may pass the copy put aside
        dead = rank[:MEANING_BYTES] != held_rank[:MEANING_BYTES]
        what = "other content (another prompt, gold or verifier" if dead else "another verdict or completion (a copy"
        why = (f"id {sample_id!r} was already received with {what} under the same id, e.g. taken by two verifier "
               "replicas); the learner keeps the copy with the lower digest, whichever arrives first")
        if rank < held_rank and replace() == held_seq:
            self.ledger.pending[sample_id] = seq
            self.held[sample_id], self.ranks[sample_id] = seq, rank
            self._refs[seq] += 1
            aside = self._unref(held_seq)
            return aside, f"{why}: kept {rank.hex()[:16]} (seq {seq}), put aside {held_rank.hex()[:16]}", dead
        late = ", but its group was complete already and stands as it went to a step" if rank < held_rank else ""
        return seq, f"{why}{late}: kept {held_rank.hex()[:16]} (seq {held_seq}), put aside {rank.hex()[:16]}", dead

    def receive_group(self, items: list[Scored], seq: int, span: SpanContext | None, rank: bytes,
                      replace: Callable[[Scored], int | None], refuse: bool = False) -> Intake:
        """One message that carries a whole group (protocol/groups.py): each member is received under
        the message's ``seq`` and ``rank`` (``group_rank``: the same for every member, so a conflict
        between two copies is decided alike for all of them), as a sample message was. ``refuse``:
        the message is unusable (ids outside the vocabulary): new members are dropped ``invalid``.
        What the message and the others it frees become is in the ``Intake``."""
        intake = Intake()
        for sc in items:
            sid = sc.sample_id
            receipt = self.receive(sid, seq, span, rank=rank)
            if receipt == "held_again":
                intake.held = True
            elif receipt == "new" and refuse:
                self.drop(sid, "invalid")  # recorded in the next checkpoint; the message is dead-lettered
            elif receipt == "new":
                intake.joined.append(sc)
                intake.held = True
            elif receipt == "conflict" and not refuse:
                aside, why, dead = self.conflict(sid, seq, rank, lambda sc=sc: replace(sc))
                if aside == seq:
                    intake.put_aside = (why, dead)
                else:  # this copy takes the member's place; the other message may be free now
                    intake.held = True
                    if aside is not None:
                        intake.released.append((aside, why, dead))
        return intake

    @property
    def conflicts(self) -> int:
        """Conflicting copies put aside (run total)."""
        return self.drops.samples.get("conflict", 0)

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
        """``count`` group messages that never reached this learner (``retention_gap``): counted as
        groups, no ids (how many samples they held is not known)."""
        self.drops.groups[reason] += count

    def _settle(self, sample_id: str) -> int | None:
        """Settle ``sample_id``; the stream seq of its message once no other held sample shares it."""
        if sample_id in self.ledger.pending:
            self.ledger.settle(sample_id)
        self.spans.pop(sample_id, None)  # the step span has taken its link already
        self.ranks.pop(sample_id, None)
        seq = self.held.pop(sample_id, None)
        return None if seq is None else self._unref(seq)

    def _unref(self, seq: int) -> int | None:
        """One sample held under ``seq`` is settled or moved; ``seq`` once it holds none."""
        self._refs[seq] -= 1
        if self._refs[seq] > 0:
            return None
        del self._refs[seq]
        return seq

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
        (copies of a sample, ``duplicate``, ``late_duplicate`` and ``conflict``, are counted apart)."""
        copies = ("duplicate", "late_duplicate", "conflict")
        dropped = sum(v for k, v in self.drops.samples.items() if k not in copies)
        pending = self.pending()
        return {"scored": samples_trained + dropped + pending, "trained": samples_trained, "dropped": dropped,
                "in_flight": pending, "copies": self.drops.samples.get("duplicate", 0) + self.late_duplicates
                + self.conflicts}

    def drop_totals(self) -> dict[str, int]:
        return {**self.drops.samples, "late_duplicate": self.ledger.late_duplicates}


def span_links(custody: Custody, scored: list[Scored]) -> list[SpanContext]:
    """The span contexts of ``scored`` that custody knows (the step span links them)."""
    return [c for sc in scored if (c := custody.spans.get(sc.sample_id)) is not None]


__all__ = ["CONFLICT_ERROR", "Custody", "Intake", "Receipt", "copy_rank", "span_links"]
