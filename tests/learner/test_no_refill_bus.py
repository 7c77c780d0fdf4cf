"""Dynamic sampling without refill (``learn.dynamic_sampling_refill = false``), read by a real (dry)
learner process on a real nats-server: each step takes the next ``groups_per_step`` complete groups
and trains the ones with signal, the flat ones are dropped and counted, no group is waited for or
trained twice. (A batch with nothing to train is not a step: tests/learner/test_pacing.py.)"""

from __future__ import annotations

import json

import pytest

from rlvr.protocol import DeadLetter
from tests.busclient import BusClient
from tests.conftest import write_config
from tests.factories import scored_messages
from tests.learner.learner_helpers import scored_groups

pytestmark = pytest.mark.slow


def test_without_refill_a_step_trains_the_groups_with_signal_among_the_next_batch(actors, nats_server, tmp_path):
    run = "nr"
    config = write_config(tmp_path / "nr.json", {
        "run": run, "bus": {"heartbeat_every_s": 0.5, "ack_wait_s": 30.0},
        "learn": {"group_size": 4, "groups_per_step": 3, "steps": 2, "max_staleness": 1000,
                  "dynamic_sampling": True, "dynamic_sampling_refill": False, "checkpoint_every": 100,
                  "out_dir": str(tmp_path / run), "lease_ttl_s": 2.0},
    })
    # Six groups, two of them flat: whatever order the learner takes them in, two batches of three,
    # each with at least one group with signal, so two steps that train the four with signal.
    bus = BusClient(nats_server.url, run)
    actors.init(config)
    bus.publish_scored(scored_messages(scored_groups(run, 6, vocab=50, zero_variance=(0, 4))))

    proc = actors.start("learn", config, "learn-0")
    assert proc.wait(timeout=180) == 0, actors.log_text("learn-0")[-3000:]
    summary = json.loads((tmp_path / run / "learner_summary.json").read_text())
    steps = [r for r in map(json.loads, (tmp_path / run / "metrics.jsonl").read_text().splitlines())
             if "train_s" in r]
    assert sorted(r["groups"] for r in steps) in ([1, 3], [2, 2])  # never refilled to three
    assert summary["steps"] == 2 and summary["samples"]["trained"] == 16
    assert summary["drops"]["zero_variance"] == 8  # the two flat groups' members, each counted once
    assert [d for d in bus.decoded("DEAD", DeadLetter) if d.stage == "learn"] == []
