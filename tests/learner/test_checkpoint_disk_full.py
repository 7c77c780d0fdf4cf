"""A checkpoint on a full disk: the learner holds and writes it once there is space, instead of exiting.

Found by the chaos run's ``checkpoint_disk_full`` (issue 38): the learner exited 1 on ENOSPC, which
under ``rlvr-actor up`` stops the whole run. The full disk here is ``/dev/full`` (every write fails with
ENOSPC) behind the name a commit writes first, ``commit-N/learner.json.tmp``: no root, no mount; the
space comes back when the link is removed.
"""

from __future__ import annotations

import errno

import pytest

from rlvr.learner.custody.checkpoint import CheckpointStore, LearnerState, LedgerEntry, is_disk_full
from tests.busclient import BusClient
from tests.conftest import wait_for
from tests.factories import scored_messages
from tests.learner.learner_helpers import scored_groups
from tests.learner.test_learner_recovery import _dry_config


def _full(store_root, commit: int):
    d = store_root / f"commit-{commit:06d}"
    d.mkdir(parents=True, exist_ok=True)
    trap = d / "learner.json.tmp"
    trap.symlink_to("/dev/full")
    return trap


def test_a_commit_that_met_a_full_disk_counts_nothing_and_succeeds_once_there_is_space(tmp_path):
    store = CheckpointStore(tmp_path)
    state = LearnerState(step=3)
    trap = _full(tmp_path, 1)
    with pytest.raises(OSError) as e:
        store.commit(state, LedgerEntry(3, ["a"], {}))
    assert e.value.errno == errno.ENOSPC and is_disk_full(e.value)
    assert state.commits == 0 and not (tmp_path / "latest").exists()
    trap.unlink()
    store.commit(state, LedgerEntry(3, ["a"], {}))  # the same commit again
    assert state.commits == 1 and (tmp_path / "latest").read_text() == "commit-000001"
    assert CheckpointStore(tmp_path).load_latest().commits == 1


@pytest.mark.slow
def test_a_learner_whose_checkpoint_disk_is_full_holds_and_commits_once_there_is_space(actors, nats_server, tmp_path):
    run = "diskfull"
    cfg = _dry_config(tmp_path, run, steps=4, out="o", checkpoint_every=2)
    proc = actors.start("learn", cfg, "learn-0")
    bus = BusClient(nats_server.url, run)
    bus.wait_heartbeat(lambda hb: hb.role == "learn" and hb.state == "running", timeout_s=120)
    checkpoints = tmp_path / "o" / "checkpoints"
    trap = _full(checkpoints, 1)
    samples = scored_groups(run, 4, vocab=50)
    bus.publish_scored(scored_messages(samples))
    wait_for(lambda: actors.log_text("learn-0").count('"checkpoint_disk_full"') >= 2 or proc.poll() is not None,
             timeout_s=120, what="two failed tries of the first checkpoint")
    assert proc.poll() is None, actors.log_text("learn-0")[-3000:]  # held, not exited
    assert not (checkpoints / "latest").exists()
    hb = bus.wait_heartbeat(lambda h: h.role == "learn" and h.counters.get("checkpoint_disk_full", 0) >= 1,
                            timeout_s=30)
    assert hb is not None  # `status` can show it
    trap.unlink()  # the space is back
    assert proc.wait(timeout=180) == 0, actors.log_text("learn-0")[-3000:]
    entries = CheckpointStore(checkpoints).ledger_entries()
    trained = [sid for e in entries for sid in e.trained]
    assert sorted(trained) == sorted(sc.sample_id for sc in samples)  # every sample once
