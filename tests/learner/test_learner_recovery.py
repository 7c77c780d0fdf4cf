"""The learner's custody of scored samples at its edges, on a real nats-server
with real learner processes (dry: no engine, so each test is about custody,
not optimisation):

- samples acked before the first checkpoint are replayed after a SIGKILL
  (the old learner bound its durable consumer where it left off, and lost them);
- a second learner on the same run refuses to start and names the holder;
- a learner whose checkpoint floor lies below what SCORED still holds
  (retention removed groups it never settled) stops and says how many,
  unless told to continue.

SCORED carries one message per task's group (protocol/groups.py): a stream
sequence is a whole group.
"""

from __future__ import annotations

import json
import signal

import anyio
import nats
import pytest

from rlvr.learner.custody.checkpoint import CheckpointStore
from tests.busclient import BusClient
from tests.conftest import wait_for, write_config
from tests.factories import scored_messages
from tests.learner.learner_helpers import scored_groups

pytestmark = pytest.mark.slow


def _dry_config(tmp_path, run: str, *, steps: int, out: str, **learn):
    return write_config(
        tmp_path / f"{run}-{out}.json",
        {
            "run": run,
            "bus": {"heartbeat_every_s": 0.5, "ack_wait_s": 30.0},
            "learn": {"group_size": 4, "groups_per_step": 1, "steps": steps, "max_staleness": 1000,
                      "checkpoint_every": 100, "out_dir": str(tmp_path / out), "lease_ttl_s": 2.0, **learn},
        },
    )


def _publish(bus: BusClient, run: str, groups: int) -> set[str]:
    samples = scored_groups(run, groups, vocab=50)
    bus.publish_scored(scored_messages(samples))
    return {sc.sample_id for sc in samples}


def test_samples_acked_before_the_first_checkpoint_are_replayed_after_a_kill(actors, nats_server, tmp_path):
    run = "early"
    cfg = _dry_config(tmp_path, run, steps=6, out="o")
    first = actors.start("learn", cfg, "learn-0")
    bus = BusClient(nats_server.url, run)
    bus.wait_heartbeat(lambda hb: hb.role == "learn" and hb.state == "running", timeout_s=120)
    samples = scored_groups(run, 6, vocab=50)
    published = {sc.sample_id for sc in samples}
    messages = scored_messages(samples)
    # Four of the six groups: the learner can train at most 4 of its 6 steps, so it
    # cannot reach its final checkpoint before the kill (checkpoint_every = 100).
    bus.publish_scored(messages[:4])
    wait_for(lambda: actors.log_text("learn-0").count('"event": "step"') >= 3, timeout_s=120, what="3 steps")
    actors.kill("learn-0", signal.SIGKILL)
    first.wait()
    assert not (tmp_path / "o" / "checkpoints" / "latest").exists()

    second = actors.start("learn", cfg, "learn-1")
    bus.publish_scored(messages[4:])
    assert second.wait(timeout=180) == 0, actors.log_text("learn-1")[-3000:]
    entries = CheckpointStore(tmp_path / "o" / "checkpoints").ledger_entries()
    trained = [sid for e in entries for sid in e.trained]
    assert sorted(trained) == sorted(published)  # all six groups, each sample once


def test_a_second_learner_on_the_same_run_refuses_and_names_the_holder(actors, nats_server, tmp_path):
    run = "twice"
    holder = actors.start("learn", _dry_config(tmp_path, run, steps=1000, out="a"), "learn-a")
    bus = BusClient(nats_server.url, run)
    bus.wait_heartbeat(lambda hb: hb.replica == "learn-a" and hb.state == "running", timeout_s=120)

    intruder = actors.start("learn", _dry_config(tmp_path, run, steps=1000, out="b"), "learn-b")
    assert intruder.wait(timeout=120) != 0
    log = actors.log_text("learn-b")
    assert "already has a learner" in log and "learn-a" in log
    assert holder.poll() is None  # the holder is untouched and still running
    assert not (tmp_path / "b" / "metrics.jsonl").exists()


def _purge_oldest(url: str, stream: str, keep: int) -> None:
    async def go():
        nc = await nats.connect(url)
        try:
            await nc.jetstream().purge_stream(stream, keep=keep)
        finally:
            await nc.close()

    anyio.run(go)


def test_a_retention_gap_stops_the_learner_with_the_count_unless_allowed(actors, nats_server, tmp_path):
    run = "gap"
    cfg = _dry_config(tmp_path, run, steps=1, out="o")
    actors.init(cfg)
    bus = BusClient(nats_server.url, run)
    published = _publish(bus, run, 3)  # 3 group messages of 4 samples, sequences 1-3
    _purge_oldest(nats_server.url, bus.names.stream("SCORED"), keep=1)  # as age or byte retention would

    stopped = actors.start("learn", cfg, "learn-0")
    assert stopped.wait(timeout=120) != 0
    log = actors.log_text("learn-0")
    assert "2 scored groups (stream sequences 1 to 2)" in log and "allow_retention_gap" in log

    allowed = _dry_config(tmp_path, run, steps=1, out="o", allow_retention_gap=True)
    went_on = actors.start("learn", allowed, "learn-1")
    assert went_on.wait(timeout=120) == 0, actors.log_text("learn-1")[-3000:]
    entries = CheckpointStore(tmp_path / "o" / "checkpoints").ledger_entries()
    trained = {sid for e in entries for sid in e.trained}
    assert trained == {sid for sid in published if sid.startswith(f"{run}-g2/")}  # the group SCORED still had
    # Counted as groups (how many samples they held is not known), and shown where a person reads it.
    assert json.loads((tmp_path / "o" / "learner_summary.json").read_text())["retention_gap_groups"] == 2


def test_a_retention_gap_removes_whole_groups_and_the_learner_that_resumes_holds_none_unsettled(
        actors, nats_server, tmp_path):
    """The quick chaos run's loss (seed 0, 2026-12-02): a purge cut one group in two, and the
    learner that resumed held the survivors, never settled. A group is one message now
    (protocol/groups.py), so retention removes a group whole or not at all: the learner that
    resumes past the gap trains every group SCORED still holds, drops none as partial, and
    leaves nothing delivered and unacked."""
    run = "cut"
    cfg = _dry_config(tmp_path, run, steps=2, out="o", allow_retention_gap=True)
    actors.init(cfg)
    bus = BusClient(nats_server.url, run)
    samples = scored_groups(run, 3, vocab=50)
    messages = scored_messages(samples)
    bus.publish_scored(messages[:2])  # groups 0 and 1: sequences 1-2
    _purge_oldest(nats_server.url, bus.names.stream("SCORED"), keep=1)  # group 1 stays, whole
    bus.publish_scored(messages[2:])

    learner = actors.start("learn", cfg, "learn-0")
    assert learner.wait(timeout=120) == 0, actors.log_text("learn-0")[-3000:]
    entries = CheckpointStore(tmp_path / "o" / "checkpoints").ledger_entries()
    assert {sid: why for e in entries for sid, why in e.dropped.items()} == {}  # no group partial
    assert {sid for e in entries for sid in e.trained} == {sc.sample_id for sc in samples[4:]}  # groups 1 and 2
    info = bus.consumer("SCORED", "learn")
    assert info.num_ack_pending == 0 and info.num_pending == 0
