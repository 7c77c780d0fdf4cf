"""`rlvr-actor up` runs the walking skeleton end to end across real processes,
`status` sees the roles during the run, and one task's trace spans all three."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.conftest import REPO, wait_for

SKELETON = REPO / "tests" / "data" / "skeleton.toml"


def _nats_url(stdout_path: Path) -> str | None:
    for line in stdout_path.read_text().splitlines():
        if "nats-server on " in line:
            return line.split("nats-server on ")[1].split()[0]
    return None


def test_up_runs_the_skeleton_status_sees_it_and_traces_link(tmp_path):
    run_dir = tmp_path / "run"
    out = tmp_path / "up.out"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with open(out, "w") as f:
        up = subprocess.Popen(
            [sys.executable, "-m", "rlvr.actors.cli", "up", "--config", str(SKELETON), "--run-dir", str(run_dir),
             "--display", "plain"],
            stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    try:
        url = wait_for(lambda: _nats_url(out), timeout_s=60, what="the embedded nats-server")

        def status():
            res = subprocess.run(
                [sys.executable, "-m", "rlvr.actors.cli", "status", "--nats", url, "--run", "skeleton", "--wait", "2.5",
                 "--json"],
                capture_output=True, text=True, env=env,
            )
            if res.returncode != 0:
                return None
            st = json.loads(res.stdout)
            return st if {r["role"] for r in st["replicas"]} == {"learn", "rollout", "verify"} else None

        st = wait_for(status, timeout_s=90, what="status showing all three roles")
        assert set(st["streams"]) == {"TASKS", "ROLLOUTS", "SCORED", "WEIGHTS", "DEAD"}
        assert all("messages" in v for v in st["streams"].values())
        assert {"rollout", "verify", "learn"} <= set(st["consumers"])
        assert sum(r["role"] == "verify" for r in st["replicas"]) == 2
        assert up.wait(timeout=300) == 0
    finally:
        if up.poll() is None:
            os.killpg(up.pid, 9)
            up.wait()
    text = out.read_text()
    assert "summary" in text and f"run dir: {run_dir}" in text
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 12 and summary["samples_trained"] > 0 and summary["exit_code"] == 0
    assert summary["pass_at_1_before"] is not None and summary["pass_at_1_after"] is not None
    assert (run_dir / "logs" / "learn-0.log").exists() and (run_dir / "logs" / "nats-server.log").exists()
    assert "exited with 0" in text and "exited with 1" not in text

    # Traces: one task's spans across the learner (feeder), rollout and verify processes.
    spans = [json.loads(line) for p in (run_dir / "traces").glob("*.jsonl") for line in p.read_text().splitlines()]
    services = defaultdict(set)
    names = defaultdict(set)
    for s in spans:
        services[s["trace_id"]].add(s["service"])
        names[s["trace_id"]].add(s["name"])
    full = [t for t, svc in services.items() if svc == {"rlvr-learn", "rlvr-rollout", "rlvr-verify"}]
    assert full, "no trace crosses all three processes"
    assert {"feeder.task", "rollout.generate", "verify.score"} <= names[full[0]]
    # The optimizer step links to the spans of the samples it consumed, whose traces start at the feeder.
    steps = [s for s in spans if s["name"] == "learn.step"]
    assert steps and all(s["links"] for s in steps)
    linked = {link["trace_id"] for s in steps for link in s["links"]}
    assert linked <= {t for t, n in names.items() if "feeder.task" in n}
