"""Learner checkpoints: engine state plus the learner's own state, committed atomically.

Layout under ``<out>/checkpoints``::

    commit-000004/engine/        DeepSpeed checkpoint (model, optimizer, scheduler, RNG)
    commit-000004/learner.json   LearnerState: step, version, feeder position, ledger, drops
    ledger/commit-000004.json    ids trained / dropped since the previous commit (the 4th commit)
    latest                       "commit-000004", replaced by rename only when all of the above is on disk

A checkpoint that is half written when the process dies is never pointed to
by ``latest``; ``load_latest`` ignores it and removes its ledger file, so the
ledger files always describe exactly the committed steps.

Directories are named by commit, not by step: two commits can share a step
(the final checkpoint after the last step, or one after drops only), and
saving the second into the first one's directory would rewrite the only
committed checkpoint in place, so a kill during that save left it torn (an
empty RNG file; the exactly-once test caught it). A new commit never writes
into a committed directory.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import msgspec

from rlvr.learner.custody.ledger import LedgerState
from rlvr.learner.watch.records import EvalResult


class LearnerState(msgspec.Struct):
    step: int = 0
    version: int = 0
    issued: int = 0  # training tasks the feeder has issued
    eval_rounds: int = 0
    ledger: LedgerState = msgspec.field(default_factory=LedgerState)
    drops: dict[str, int] = {}
    outcomes: dict[str, int] = {}  # verifier outcomes of the training samples received, run totals
    samples_trained: int = 0
    commits: int = 0  # checkpoints committed so far; names the ledger files
    eval_history: list[EvalResult] = []
    sft_done: bool = False


class LedgerEntry(msgspec.Struct):
    step: int
    trained: list[str]
    dropped: dict[str, str]  # sample id -> reason


class CheckpointStore:
    def __init__(self, root: Path, keep: int = 2) -> None:
        self.root = root
        self.keep = keep
        (root / "ledger").mkdir(parents=True, exist_ok=True)

    def commit_dir(self, commit: int) -> Path:
        return self.root / f"commit-{commit:06d}"

    def engine_dir(self, commit: int) -> Path:
        """The engine checkpoint of commit number ``commit``: the committed one
        is ``engine_dir(state.commits)``, the next goes to ``state.commits + 1``."""
        return self.commit_dir(commit) / "engine"

    def committed_engine_dir(self) -> Path | None:
        """The engine checkpoint ``latest`` names (also in run dirs written
        before directories were named by commit, whose ``latest`` names a step)."""
        latest = self.root / "latest"
        return self.root / latest.read_text().strip() / "engine" if latest.exists() else None

    def commit(self, state: LearnerState, entry: LedgerEntry) -> None:
        """Write learner state and ledger entry, then flip ``latest``. The
        engine checkpoint must already be in ``engine_dir(state.commits + 1)``."""
        n = state.commits + 1  # ``state`` counts it only once ``latest`` names it: a failed commit can be retried
        d = self.commit_dir(n)
        d.mkdir(parents=True, exist_ok=True)
        _atomic_write(d / "learner.json", msgspec.json.encode(msgspec.structs.replace(state, commits=n)))
        _atomic_write(self.root / "ledger" / f"commit-{n:06d}.json", msgspec.json.encode(entry))
        _atomic_write(self.root / "latest", d.name.encode())
        state.commits = n
        self._prune(n)

    def load_latest(self) -> LearnerState | None:
        latest = self.root / "latest"
        if not latest.exists():
            self._drop_ledgers_after(0)
            return None
        d = self.root / latest.read_text().strip()
        state = msgspec.json.decode((d / "learner.json").read_bytes(), type=LearnerState)
        self._drop_ledgers_after(state.commits)
        return state

    def ledger_entries(self) -> list[LedgerEntry]:
        return [
            msgspec.json.decode(p.read_bytes(), type=LedgerEntry)
            for p in sorted((self.root / "ledger").glob("commit-*.json"))
        ]

    def _drop_ledgers_after(self, commits: int) -> None:
        # An entry written by a commit whose `latest` flip never happened.
        for p in (self.root / "ledger").glob("commit-*.json"):
            if int(p.stem.split("-")[1]) > commits:
                p.unlink()

    def _prune(self, current: int) -> None:
        commits = sorted(int(p.name.split("-")[1]) for p in self.root.glob("commit-*") if p.is_dir())
        for c in commits[: -self.keep]:
            if c != current:
                shutil.rmtree(self.commit_dir(c), ignore_errors=True)


def is_disk_full(e: BaseException) -> bool:
    """No space, or no quota, where a checkpoint is written: what freeing space fixes, so worth waiting for."""
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
