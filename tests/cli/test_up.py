"""`rlvr-actor up` runs the walking skeleton end to end across real processes,
`status` sees the roles during the run, and one task's trace spans all three;
Ctrl-C (SIGINT to its process group, as a terminal sends it) stops every
process it started, during the run and during the warm-up, and keeps the logs;
and if `up` is SIGKILLed, its roles still get SIGTERM and stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import msgspec

from rlvr.cli.run_config import load_config
from rlvr.cli.commands.up import builtin_config_path
from tests.conftest import REPO, wait_for, write_config

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
            [sys.executable, "-m", "rlvr.cli", "up", "--config", str(SKELETON), "--run-dir", str(run_dir),
             "--display", "plain"],
            stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    try:
        url = wait_for(lambda: _nats_url(out), timeout_s=60, what="the embedded nats-server")

        def status():
            res = subprocess.run(
                [sys.executable, "-m", "rlvr.cli", "status", "--nats", url, "--run", "skeleton", "--wait", "2.5",
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


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (the run dir: every child of `up` does)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended while we looked
            continue
        if text in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


def _start_up(config: Path, run_dir: Path, out: Path) -> subprocess.Popen:
    # Its own process group, as a shell gives a foreground job: Ctrl-C is SIGINT to that group.
    with open(out, "w") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "rlvr.cli", "up", "--config", str(config), "--run-dir", str(run_dir),
             "--display", "plain"],
            stdout=f, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True,
        )


def _ctrl_c(up: subprocess.Popen) -> int:
    os.killpg(up.pid, signal.SIGINT)
    try:
        return up.wait(timeout=60)
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()


def _start_endless_skeleton(tmp_path: Path) -> tuple[subprocess.Popen, Path, Path]:
    """`up` on the skeleton with steps it would take hours to finish: only a signal ends it."""
    raw = msgspec.to_builtins(load_config(SKELETON))
    raw["learn"]["steps"] = 1_000_000
    run_dir, out = tmp_path / "run", tmp_path / "up.out"
    return _start_up(write_config(tmp_path / "long.json", raw), run_dir, out), run_dir, out


def _learner_stepped(run_dir: Path) -> bool:
    metrics = run_dir / "metrics.jsonl"
    return metrics.exists() and '"step"' in metrics.read_text()


def test_ctrl_c_during_the_run_stops_every_process_and_keeps_the_logs(tmp_path):
    up, run_dir, out = _start_endless_skeleton(tmp_path)
    try:
        wait_for(lambda: _learner_stepped(run_dir), timeout_s=120, what="the learner's first step")
    finally:
        code = _ctrl_c(up)
    text = out.read_text()
    assert code == 0, text[-3000:]
    assert "received SIGINT: stopping every role" in text
    for replica in ("learn-0", "rollout-0", "verify-0", "verify-1"):
        assert f"{replica} exited with 0" in text, text[-3000:]
        assert (run_dir / "logs" / f"{replica}.log").stat().st_size > 0
    assert (run_dir / "logs" / "nats-server.log").exists() and (run_dir / "summary.json").exists()
    assert _processes_mentioning(str(run_dir)) == []  # every child and the nats-server are gone


def test_ctrl_c_during_the_warm_up_stops_it_promptly(tmp_path):
    raw = msgspec.to_builtins(load_config(builtin_config_path()))
    # A target it never reaches: the warm-up would run 10^6 steps unless stopped.
    raw["learn"]["prepare"].update(sft_target_pass_at_1=1.0, sft_max_steps=1_000_000, sft_check_every=2,
                                   sft_check_prompts=8, sft_batch=8)
    config = write_config(tmp_path / "builtin.json", raw)
    run_dir, out = tmp_path / "run", tmp_path / "up.out"
    up = _start_up(config, run_dir, out)
    try:
        wait_for(lambda: "[sft] step" in out.read_text(), timeout_s=180, what="the warm-up's first check")
    finally:
        code = _ctrl_c(up)
    text = out.read_text()
    assert code == 0, text[-3000:]
    assert "received SIGINT during preparation: stopped" in text
    assert "started learn-0" not in text  # no role was started after the stop
    assert (run_dir / "logs" / "prepare.log").exists() and (run_dir / "logs" / "nats-server.log").exists()
    assert _processes_mentioning(str(run_dir)) == []


def test_roles_stop_when_up_is_killed_without_a_chance_to_clean_up(tmp_path):
    up, run_dir, _ = _start_endless_skeleton(tmp_path)

    def roles_left() -> list[str]:
        return [p for p in _processes_mentioning(str(run_dir)) if "--role" in p]

    try:
        wait_for(lambda: _learner_stepped(run_dir), timeout_s=120, what="the learner's first step")
        assert len(roles_left()) == 4
        os.kill(up.pid, signal.SIGKILL)  # no handler runs: only the death signal reaches the roles
        up.wait()
        wait_for(lambda: not roles_left(), timeout_s=60, what="every role to stop after up died")
    finally:
        # The embedded nats-server (a Go binary) cannot follow `up`: clean it up here.
        for line in _processes_mentioning(str(run_dir)):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
    # Each role got SIGTERM and stopped as on any other stop request, not killed mid-write.
    for replica in ("learn-0", "rollout-0", "verify-0", "verify-1"):
        log = (run_dir / "logs" / f"{replica}.log").read_text()
        assert "stop_requested" in log and "SIGTERM" in log and "actor_stop" in log, replica


def test_a_role_that_fails_at_start_up_shows_its_own_reason_and_up_exits_non_zero(tmp_path):
    """`up` printed only "verify-0 exited with 1 ...; see logs/verify-0.log" and the clear message
    sat inside a JSON log line (issue 33): the terminal now shows the role's own error."""
    raw = msgspec.toml.decode(SKELETON.read_bytes())
    raw.setdefault("verify", {})["plugins"] = ["no_such_reward_module_xyz:score"]
    cfg = write_config(tmp_path / "bad.json", raw)
    out = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "up", "--config", str(cfg), "--run-dir", str(tmp_path / "run"),
         "--display", "plain"],
        capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text[-3000:]
    assert "exited with 1" in text and "cannot import 'no_such_reward_module_xyz'" in text, text[-3000:]
