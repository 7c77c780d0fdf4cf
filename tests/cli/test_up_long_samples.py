"""Under ``rlvr-actor up`` (its embedded nats-server), a group of two 1M-token samples (issue 46) is
generated, scored and trained exactly once: the embedded server serves the shipped configs'
max_payload (8 MB, not the server's default 1 MB), and the group, ~20 MB, travels by reference."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlvr.learner.custody.checkpoint import CheckpointStore
from tests.conftest import write_config

pytestmark = pytest.mark.slow
TOKENS = 1_000_000


def test_up_trains_a_group_of_1m_token_samples_exactly_once(tmp_path):
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path / "long.json", {
        "run": "uplong",
        "rollout": {"engine": {"kind": "trivial", "lengths": {"median_tokens": TOKENS, "sigma": 0.0,
                                                               "vocab_size": 256}}},
        "verify": {"pool_size": 1, "warm_verifiers": [], "concurrency": 1},
        "learn": {"group_size": 2, "groups_per_step": 1, "steps": 1, "max_staleness": 1000, "checkpoint_every": 1,
                  "max_inflight_tasks": 1, "dynamic_sampling": False,
                  "sampling": {"temperature": 1.0, "max_tokens": TOKENS}},
        "up": {"verify_replicas": 1},
    })
    out = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "up", "--config", str(cfg), "--run-dir", str(run_dir), "--display", "plain"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    assert "max_payload: 8MB" in (run_dir / "nats" / "nats-server.conf").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["samples_trained"] == 2 and summary["exit_code"] == 0
    entries = CheckpointStore(run_dir / "checkpoints").ledger_entries()
    trained = [sid for e in entries for sid in e.trained]
    assert len(trained) == len(set(trained)) == 2  # the group's two samples, each once
    steps = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
             if "response_len_max" in r]
    assert [r["response_len_max"] for r in steps] == [TOKENS]
    bodies = [line for line in (run_dir / "logs" / "rollout-0.log").read_text().splitlines()
              if "group_body_stored" in line]
    assert bodies, "the group did not travel by reference"
