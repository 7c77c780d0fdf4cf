"""`rlvr-actor autoscale` SIGKILLed and started again (a supervisor's restart, the chaos suite's
``autoscale:sigkill_*`` faults): the killed scaler's replicas follow it out (``actors/lifeline.py``),
and the new scaler never starts a replica under the name of one that still runs.

Found by bench/chaos/autoscale_scenario.py: every scaler numbered its replicas from ``verify-0``,
so the restarted one started ``verify-1`` while the old ``verify-1`` was still draining: two
processes on one log file and one heartbeat subject. It also wrote no ``started`` line for the
``min_replicas`` it started first (the event hook was set after them).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO, wait_for, write_config

pytestmark = pytest.mark.slow


def _started(log_dir: Path) -> list[dict]:
    path = log_dir / "autoscale.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if e["event"] == "started"]


def _pid(event: dict) -> int:
    return int(event["detail"].split("pid ")[-1])


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_a_restarted_autoscaler_never_reuses_a_name_and_the_killed_ones_replicas_follow_it_out(tmp_path, actors):
    config = write_config(tmp_path / "auto.json", {
        "run": "restart", "bus": {"heartbeat_every_s": 0.5, "drain_timeout_s": 2.0},
        "autoscale": {"min_replicas": 1, "max_replicas": 2, "interval_s": 0.5}})
    actors.init(config)
    log_dir = tmp_path / "fleet"
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))

    def scaler() -> subprocess.Popen:
        with open(tmp_path / "scaler.out", "ab") as f:
            return subprocess.Popen(
                [sys.executable, "-m", "rlvr.cli", "autoscale", "--role", "verify", "--config", str(config),
                 "--nats", actors.nats_url, "--log-dir", str(log_dir)],
                stdout=f, stderr=subprocess.STDOUT, env=env, cwd=tmp_path, start_new_session=True)

    first, second = scaler(), None
    try:
        old = wait_for(lambda: _started(log_dir), timeout_s=60, what="the first replica's start in autoscale.jsonl")[0]
        assert old["replica"] == "verify-0"
        wait_for(lambda: '"actor_start"' in (log_dir / "verify-0.log").read_text(errors="replace"), timeout_s=90,
                 what="verify-0 to run")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(30)
        second = scaler()
        new = wait_for(lambda: _started(log_dir)[1:], timeout_s=60, what="the restarted scaler's first replica")[0]
        assert new["replica"] == "verify-1", new
        wait_for(lambda: not _alive(_pid(old)), timeout_s=30,
                 what="the killed scaler's replica to drain and exit (it follows its parent)")
        assert '"stop_requested"' in (log_dir / "verify-0.log").read_text(errors="replace")  # SIGTERM: a drain
    finally:
        if second is not None and second.poll() is None:
            os.kill(second.pid, signal.SIGTERM)
            try:
                second.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(second.pid, signal.SIGKILL)
        for e in _started(log_dir):
            if _alive(_pid(e)):
                os.kill(_pid(e), signal.SIGKILL)
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
