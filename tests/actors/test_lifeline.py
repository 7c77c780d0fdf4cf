"""``follow_up`` (actors/lifeline.py): a role started by ``rlvr-actor up`` ends when ``up`` does, even when
``up`` died before the role could ask for it (the death signal it asked for would then never come)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

CHILD = "from rlvr.actors.lifeline import follow_up; print(follow_up()); print('still running')"


def _role(up_pid: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, RLVR_UP_PID=up_pid))


def test_a_role_whose_up_is_alive_follows_it_and_runs_on():
    proc = _role(str(os.getpid()))  # this test is the role's parent, as up would be
    assert proc.returncode == 0 and proc.stdout.split() == ["True", "still", "running"]


def test_a_role_whose_up_died_before_it_asked_to_follow_it_stops_at_once():
    proc = _role(str(os.getppid()))  # alive, but not the role's parent: the up that started it is gone
    assert proc.returncode == -signal.SIGTERM and "still running" not in proc.stdout
