"""Checkpoint store: a commit never writes into the committed checkpoint."""

from __future__ import annotations

import msgspec

from rlvr.learner.custody.checkpoint import CheckpointStore, LearnerState, LedgerEntry


def _save_engine(store: CheckpointStore, state: LearnerState, payload: bytes) -> None:
    d = store.engine_dir(state.commits + 1)  # where the learner saves before committing
    d.mkdir(parents=True, exist_ok=True)
    (d / "rng_rank0.pt").write_bytes(payload)


def test_a_second_commit_at_the_same_step_leaves_the_committed_one_intact(tmp_path):
    store = CheckpointStore(tmp_path)
    state = LearnerState(step=6, version=6)
    _save_engine(store, state, b"good")
    store.commit(state, LedgerEntry(6, ["a"], {}))
    committed = store.engine_dir(state.commits)

    # The final checkpoint after the last step has the same step; the process
    # dies half-way through its engine save (the file is truncated, never committed).
    _save_engine(store, state, b"")
    assert store.engine_dir(state.commits + 1) != committed

    restored = CheckpointStore(tmp_path).load_latest()
    assert restored is not None and (restored.step, restored.commits) == (6, 1)
    assert (store.engine_dir(restored.commits) / "rng_rank0.pt").read_bytes() == b"good"
    assert store.committed_engine_dir() == committed


def test_old_commits_are_pruned_and_the_latest_kept(tmp_path):
    store = CheckpointStore(tmp_path, keep=2)
    state = LearnerState()
    for step in (2, 4, 6, 6):
        state.step = step
        _save_engine(store, state, str(step).encode())
        store.commit(state, LedgerEntry(step, [], {}))
    assert sorted(p.name for p in tmp_path.glob("commit-*")) == ["commit-000003", "commit-000004"]
    assert store.load_latest().commits == 4
    assert len(store.ledger_entries()) == 4  # ledger entries are never pruned


def test_a_run_dir_from_before_commit_named_directories_still_loads(tmp_path):
    # Earlier versions named the directory by step; `latest` says which it is.
    (tmp_path / "step-000010" / "engine").mkdir(parents=True)
    (tmp_path / "step-000010" / "learner.json").write_bytes(msgspec.json.encode(LearnerState(step=10, commits=5)))
    (tmp_path / "latest").write_text("step-000010")
    store = CheckpointStore(tmp_path)
    assert store.load_latest().step == 10
    assert store.committed_engine_dir() == tmp_path / "step-000010" / "engine"
