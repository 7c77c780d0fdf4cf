"""`rlvr-actor status` on a live run: who holds the learner's lease, each
replica's dead letters by kind and its sandbox level, and a retention gap."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlvr.cli.commands.status import LearnerStatus, ProgressView, StreamStatus, format_learner, retention_gap
from tests.busclient import BusClient
from tests.conftest import wait_for, write_config

pytestmark = pytest.mark.slow


def test_status_names_the_lease_holder_dead_letters_and_sandbox_level(actors, nats_server, tmp_path):
    cfg = write_config(tmp_path / "run.json", {
        "run": "st", "bus": {"heartbeat_every_s": 0.5},
        "learn": {"steps": 1000, "out_dir": str(tmp_path / "out")}, "verify": {"pool_size": 1},
    })
    actors.start("learn", cfg, "learn-0")
    bus = BusClient(nats_server.url, "st")
    bus.wait_heartbeat(lambda hb: hb.role == "learn" and hb.state == "running", timeout_s=120)
    actors.start("verify", cfg, "verify-0")
    bus.publish(bus.names.rollouts, b"\xc1 not msgpack", msg_id="junk-1")
    bus.wait_heartbeat(lambda hb: hb.role == "verify" and hb.counters.get("dead_letter.malformed", 0) >= 1,
                       timeout_s=120)

    def status() -> str:
        out = subprocess.run(
            [sys.executable, "-m", "rlvr.cli", "status", "--config", str(cfg), "--nats", nats_server.url,
             "--wait", "1.5"], capture_output=True, text=True, timeout=60,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    def both_heard() -> str | None:
        text = status()
        return text if "verify-0" in text and "learn-0" in text else None

    text = wait_for(both_heard, timeout_s=60, what="both replicas in status")
    assert "lease held by learn-0" in text
    assert "dead letters: malformed=1" in text
    assert "sandbox level " in text


def test_a_retention_gap_is_shown_loudly():
    line = format_learner(LearnerStatus(progress=ProgressView(step=3, version=3, floor=40), retention_gap=5))
    assert "RETENTION GAP: up to 5 scored samples" in line and "floor 40" in line
    assert "GAP" not in format_learner(LearnerStatus())


def test_the_retention_gap_is_scored_s_first_sequence_past_the_checkpointed_floor():
    progress = ProgressView(step=3, version=3, floor=40)
    assert retention_gap(progress, StreamStatus(messages=10, bytes=1, first_seq=45)) == 5
    assert retention_gap(progress, StreamStatus(messages=10, bytes=1, first_seq=12)) == 0
    assert retention_gap(None, StreamStatus(first_seq=45)) == 0  # no checkpoint yet
    assert retention_gap(progress, StreamStatus(error="NotFoundError")) == 0
