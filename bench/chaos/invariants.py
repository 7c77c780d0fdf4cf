"""The invariant checker: what must hold after every fault and at the end.

The ground truth is what the learner committed, read the way a restarted
learner would: ``checkpoints/latest`` names a commit, its ``learner.json``
holds the ledger floor and the commit count, and ``ledger/commit-N.json``
for N up to that count list the ids trained and dropped (with a reason) by
each committed checkpoint. A ledger file past the count belongs to a commit
whose ``latest`` flip never happened and is ignored, as the learner ignores
it. This module never calls ``CheckpointStore.load_latest``: it deletes such
files, and the runner must not change what it observes.

Against that it holds every train sample id the verifiers published on
SCORED (read incrementally by ``observe.Observer``, so retention cannot hide
one; one message per task's group, each member checked as a sample under its
message's stream seq):

- trained or dropped at most once over all committed entries (``twice``);
- at the end, every published id trained or dropped exactly once; mid-run an
  unsettled id is allowed only if a copy of it lies at or above the floor
  (the learner will replay it); otherwise it is ``lost``;
- ids the learner drops without listing them (a partial group that expired,
  samples removed by retention) are accounted separately, against the
  learner's own drop counters, and reported, never counted as trained.

Not here: process liveness and stream depths (run.py checks those through
the observer) and what to inject (faults.py, poison.py).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from pathlib import Path

import msgspec

from rlvr.learner.custody.checkpoint import LearnerState, LedgerEntry


class Committed(msgspec.Struct):
    state: LearnerState | None
    entries: list[LedgerEntry]


_ENTRY_CACHE: dict[tuple[str, int, int], LedgerEntry] = {}


def read_floor(out_dir: Path) -> tuple[int, int]:
    """(floor, commits) of the committed state; (0, 0) before the first checkpoint. Cheap: one file."""
    root = out_dir / "checkpoints"
    for _ in range(200):
        try:
            name = (root / "latest").read_text().strip()
            state = msgspec.json.decode((root / name / "learner.json").read_bytes(), type=LearnerState)
            return state.ledger.floor, state.commits
        except FileNotFoundError:
            if not (root / "latest").exists():
                return 0, 0
        except msgspec.DecodeError:
            pass
        time.sleep(0.01)  # pruned or replaced under us: the next commit is already named
    raise InvariantReadError(f"could not read a stable commit under {root}")


def read_committed(out_dir: Path) -> Committed:
    """The committed state and ledger entries, as a restarted learner would see them.

    Entries numbered up to the state's commit count are immutable once committed (only
    entries past it are removed, by a restarted learner), so they are cached."""
    root = out_dir / "checkpoints"
    state = None
    for _ in range(200):
        try:
            name = (root / "latest").read_text().strip()
            state = msgspec.json.decode((root / name / "learner.json").read_bytes(), type=LearnerState)
            break
        except FileNotFoundError:
            if not (root / "latest").exists():
                return Committed(None, [])
        except msgspec.DecodeError:
            pass
        time.sleep(0.01)
    if state is None:
        raise InvariantReadError(f"could not read a stable commit under {root}")
    entries = []
    for p in sorted((root / "ledger").glob("commit-*.json")):
        if int(p.stem.split("-")[1]) > state.commits:
            continue
        try:
            stat = p.stat()
            key = (str(p), stat.st_mtime_ns, stat.st_size)
            if key not in _ENTRY_CACHE:
                _ENTRY_CACHE[key] = msgspec.json.decode(p.read_bytes(), type=LedgerEntry)
            entries.append(_ENTRY_CACHE[key])
        except FileNotFoundError:
            continue
    return Committed(state, entries)


class InvariantReadError(RuntimeError):
    pass


class Check(msgspec.Struct):
    final: bool
    published: int = 0
    trained: int = 0
    dropped_listed: dict[str, int] = {}
    dropped_unlisted: dict[str, int] = {}  # partial groups, retention gap: counted by the learner, not by id
    in_flight: int = 0  # unsettled, replayable (at or above the floor); must be 0 at the end
    lost: list[str] = []
    twice: list[str] = []
    phantom: list[str] = []  # settled ids never seen on SCORED
    partial_by_count: list[str] = []  # unlisted ids of complete groups, matched against drops["partial"]
    floor: int = 0
    step: int = 0
    commits: int = 0
    violations: list[str] = []

    @property
    def ok(self) -> bool:
        return not self.violations


def check_custody(out_dir: Path, scored: dict, *, final: bool, exclude: set[str] = frozenset(),
                  retention_purged: set[str] = frozenset()) -> Check:
    """Compare the committed ledger with every published train sample (``scored``: (seq, member) -> ScoredCopy)."""
    committed = read_committed(out_dir)
    chk = Check(final=final)
    listed: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    for e in committed.entries:
        listed.update(e.trained)
        chk.trained += len(e.trained)
        listed.update(e.dropped.keys())  # ids; the values are reasons
        dropped.update(e.dropped.values())
    chk.dropped_listed = dict(dropped)
    chk.twice = sorted(sid for sid, n in listed.items() if n > 1)
    st = committed.state
    chk.floor = st.ledger.floor if st else 1
    chk.step, chk.commits = (st.step, st.commits) if st else (0, 0)

    seqs: dict[str, list[int]] = defaultdict(list)
    groups: dict[str, set[str]] = defaultdict(set)
    size_of: dict[str, int] = {}
    for copy in scored.values():
        if copy.purpose != "train" or copy.sample_id in exclude:
            continue
        seqs[copy.sample_id].append(copy.seq)
        size_of[copy.group_id] = copy.group_size
        if copy.sample_id not in retention_purged:  # the learner never sees those: their group is partial
            groups[copy.group_id].add(copy.sample_id)
    chk.published = len(seqs)
    group_of = {copy.sample_id: copy.group_id for copy in scored.values()}
    unlisted_partial = unlisted_retention = 0
    for sid, where in seqs.items():
        if listed[sid]:
            continue
        if sid in retention_purged:
            unlisted_retention += 1
            continue
        if not final and max(where) >= chk.floor:
            chk.in_flight += 1
            continue
        if len(groups[group_of[sid]]) < size_of[group_of[sid]] and max(where) < chk.floor:
            unlisted_partial += 1  # its group never completed: expired and dropped as partial
            continue
        chk.lost.append(sid)
    chk.lost.sort()
    # The learner lists partial drops only as a count (drops["partial"]), not by id: a group whose
    # members were all published can still expire as partial when its last member came late (the
    # learner stopped longer than group_timeout_s). Up to that count, unlisted ids below the floor
    # are partial drops; only the excess is lost.
    spare = (dict(st.drops).get("partial", 0) if st else 0) - unlisted_partial
    if chk.lost and spare > 0:
        taken, chk.lost = chk.lost[:spare], chk.lost[spare:]
        unlisted_partial += len(taken)
        chk.partial_by_count = taken
    chk.phantom = sorted(sid for sid in listed if sid not in seqs and sid not in exclude
                         and sid not in retention_purged)
    counted = dict(st.drops) if st else {}
    if unlisted_partial:
        chk.dropped_unlisted["partial"] = unlisted_partial
        if counted.get("partial", 0) < unlisted_partial:
            chk.violations.append(f"{unlisted_partial} samples of incomplete groups are unsettled below the floor but "
                                  f"the learner counted only {counted.get('partial', 0)} partial drops")
    if unlisted_retention:
        chk.dropped_unlisted["retention_gap"] = unlisted_retention
    if chk.twice:
        chk.violations.append(f"{len(chk.twice)} samples trained or dropped twice, e.g. {chk.twice[:5]}")
    if chk.lost:
        chk.violations.append(f"{len(chk.lost)} samples lost (published, never settled, no replayable copy), "
                              f"e.g. {chk.lost[:5]}")
    if final and chk.phantom:
        chk.violations.append(f"{len(chk.phantom)} settled ids never published on SCORED, e.g. {chk.phantom[:5]}")
    return chk


def check_streams(obs, *, dead_expected: dict[str, str], dead_sizes: set[int]) -> tuple[dict, list[str]]:
    """At the end: every durable consumer drained, DEAD holds only the injected poison, each with a reason.

    ``dead_expected`` maps a poison's Nats-Msg-Id to its case name; ``dead_sizes``
    are the sizes of injected poison sent without an id (dead-lettered as references).
    """
    violations: list[str] = []
    consumers = {}
    for kind, durable in (("TASKS", "rollout"), ("ROLLOUTS", "verify"), ("SCORED", "learn")):
        info = obs.consumer_info(kind, durable)
        if info is None:
            violations.append(f"consumer {kind}/{durable} is missing")
            continue
        consumers[f"{kind}/{durable}"] = {"num_pending": info.num_pending, "num_ack_pending": info.num_ack_pending,
                                          "num_redelivered": info.num_redelivered}
        if info.num_ack_pending:
            violations.append(f"{kind}/{durable} has {info.num_ack_pending} messages delivered and never acked")
    letters = obs.dead_letters()
    by_kind: Counter[str] = Counter()
    unexpected = []
    for d in letters:
        by_kind[d.kind or "?"] += 1
        if not d.reason:
            violations.append(f"a dead letter from {d.stage} has no reason")
        mid = d.headers.get("Nats-Msg-Id", "")
        # A ScoredGroup's id ends ``.<verdicts digest>`` (``scored_group_msg_id``): matched on what precedes it, as
        # poison.inject does.
        if mid in dead_expected or mid.rpartition(".")[0] in dead_expected or (not mid and d.size in dead_sizes):
            continue
        unexpected.append(f"{d.stage}:{d.kind}:{mid or d.subject}:{d.reason[:120]}")
    if unexpected:
        violations.append(f"{len(unexpected)} dead letters that no injected poison explains: {unexpected[:5]}")
    return {"consumers": consumers, "dead_letters": len(letters), "dead_by_kind": dict(by_kind),
            "dead_unexpected": unexpected}, violations
