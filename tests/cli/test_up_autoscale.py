"""Under `up`, verifier replicas follow the backlog: up under a burst, back down when it clears.

The walking skeleton with a verifier that costs 0.2 s per sample while a
flag file exists (``tests.verifier_fixtures:paced``): one replica cannot keep
up, the verify consumer's backlog grows, and the autoscaler adds replicas up
to its maximum. The test then removes the flag: verification is instant,
the backlog clears, and the replicas are drained one at a time back to the
minimum. Every step of that is read from ``autoscale.jsonl`` and the plain
display, never from timing. After Ctrl-C the committed ledger must list no
sample twice, drained replicas must have exited 0, and the summary must
account for every scored sample.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from bench.chaos.invariants import read_committed
from rlvr.cli.run_config import load_config
from tests.conftest import REPO, wait_for, write_config

pytestmark = pytest.mark.slow
SKELETON = REPO / "tests" / "data" / "skeleton.toml"


def _events(run_dir: Path) -> list[dict]:
    path = run_dir / "autoscale.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _decisions(run_dir: Path, action: str) -> list[dict]:
    return [e for e in _events(run_dir) if e["event"] == "decision" and e["action"] == action]


def test_replicas_go_up_under_a_backlog_and_back_down_when_it_clears_and_every_sample_is_trained_once(tmp_path):
    flag = tmp_path / "slow"
    flag.write_text("")
    raw = msgspec.to_builtins(load_config(SKELETON))
    raw["bus"] = {"heartbeat_every_s": 0.5}
    raw["verify"].update(plugins=["tests.verifier_fixtures:paced"], concurrency=8)
    raw["learn"].update(steps=1_000_000, max_inflight_tasks=32)
    raw["learn"]["eval"]["prompts"] = 0
    raw["learn"]["dataset"]["verifier"] = {"name": "tests.verifier_fixtures:paced",
                                           "params": {"path": str(flag), "seconds": 0.2, "gold": "{gold}"}}
    raw["up"]["verify_replicas"] = 1
    # The backlog is in group messages (one per task: protocol/groups.py), 4 samples each here.
    raw["autoscale"] = {"enabled": True, "min_replicas": 1, "max_replicas": 3, "target_backlog_per_replica": 4,
                        "scale_up_cooldown_s": 2.0, "scale_down_stabilization_s": 3.0, "interval_s": 0.5,
                        "dead_after_s": 10.0}
    config = write_config(tmp_path / "auto.json", raw)
    run_dir, out = tmp_path / "run", tmp_path / "up.out"
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    with open(out, "w") as f:
        up = subprocess.Popen(
            [sys.executable, "-m", "rlvr.cli", "up", "--config", str(config), "--run-dir", str(run_dir),
             "--display", "plain"],
            stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=tmp_path,
        )
    try:
        wait_for(lambda: any(d["target"] == 3 for d in _decisions(run_dir, "up")), timeout_s=120,
                 what="the autoscaler to reach max_replicas under the backlog")
        first_up = _decisions(run_dir, "up")[0]
        assert first_up["current"] == 1 and first_up["target"] == 2  # doubling, not a jump to the max
        assert "backlog" in first_up["reason"] and "> 4 per replica x 1" in first_up["reason"]
        assert "[autoscale] verify 1 -> 2: backlog" in out.read_text()
        # The status command shows the scaler, its count and its last decision.
        text = out.read_text()
        url = next(line.split("nats-server on ")[1].split()[0] for line in text.splitlines() if "nats-server on " in line)
        status = subprocess.run([sys.executable, "-m", "rlvr.cli", "status", "--nats", url, "--run", "skeleton",
                                 "--wait", "1.5"], capture_output=True, text=True, timeout=60)
        assert "autoscale-verify" in status.stdout and "verify replicas" in status.stdout, status.stdout
        assert "last change" in status.stdout and "up " in status.stdout

        flag.unlink()  # the burst is over: verification is instant from now on
        wait_for(lambda: [d["target"] for d in _decisions(run_dir, "down")][-2:] == [2, 1], timeout_s=120,
                 what="the autoscaler to drain back to min_replicas")
        wait_for(lambda: sum(e["event"] == "drained" for e in _events(run_dir)) >= 2, timeout_s=60,
                 what="the drained replicas to exit")
    finally:
        os.killpg(up.pid, signal.SIGINT)
        code = up.wait(timeout=90)
    log = out.read_text()
    assert code == 0, log[-3000:]
    drained = [e for e in _events(run_dir) if e["event"] == "drained"]
    assert all(e["detail"] == "exited with 0" for e in drained), drained
    assert not [e for e in _events(run_dir) if e["event"] in ("replaced", "killed")]

    committed = read_committed(run_dir)
    ids = [sid for e in committed.entries for sid in [*e.trained, *e.dropped]]
    assert ids and len(ids) == len(set(ids)), "a sample was trained or dropped twice"
    summary = json.loads((run_dir / "summary.json").read_text())
    samples = summary["samples"]
    assert samples["scored"] == samples["trained"] + samples["dropped"] + samples["in_flight"]
    assert summary["steps"] > 0 and summary["autoscale"]["scale_ups"] >= 2 and summary["autoscale"]["scale_downs"] >= 2
