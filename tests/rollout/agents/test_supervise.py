"""The agent supervisor (rollout/agents/supervise.py) never leaves an agent behind, whatever moment its
rollout dies: before the supervisor could ask to die with it, or while the supervisor starts the agent.

Found by the chaos run's agents scenario: a rollout SIGKILLed while an episode's agent was being
started left that agent running, reparented to init; it later played the next fault's episode."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import psutil

from tests.conftest import wait_for
from tests.rollout.agents import agent_scripts

SUPERVISE = [sys.executable, "-P", "-m", "rlvr.rollout.agents.supervise"]
SLEEP = shutil.which("sleep") or "/bin/sleep"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _first_child(pid: int, timeout_s: float = 30.0) -> list[psutil.Process]:
    """The children of ``pid`` as soon as it has one: polled without pause, since the moment under test
    (the agent forked, not yet running) lasts milliseconds."""
    me, deadline = psutil.Process(pid), time.monotonic() + timeout_s
    while not (children := me.children()):
        assert time.monotonic() < deadline, "the supervisor never forked its agent"
    return children


def test_a_supervisor_whose_rollout_died_before_it_asked_to_follow_it_starts_no_agent(tmp_path):
    """Its parent is no longer the rollout it was started by (here: a pid that never was its parent):
    the death signal it asked for will never come, so it must not start the agent at all."""
    marker = tmp_path / "agent-ran"
    not_my_parent = os.getppid()  # alive, and not the supervisor's parent (this test process is)
    proc = subprocess.run(
        [*SUPERVISE, "--parent", str(not_my_parent), "--", sys.executable, "-c",
         f"open({str(marker)!r}, 'w').close()"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 143, proc.stderr
    assert not marker.exists()


def test_a_supervisor_started_without_its_rollout_s_pid_refuses_saying_how():
    proc = subprocess.run([*SUPERVISE, "--", SLEEP, "30"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--parent" in proc.stderr


def test_a_stop_that_comes_while_the_agent_is_being_started_leaves_no_agent_behind():
    """SIGTERM (the rollout's death signal, or its stop) sent the moment the supervisor has forked the
    agent, before the agent runs: the agent is killed with its group, never left running as an orphan.
    Repeated, since the moment is a race the old supervisor lost some of the time."""
    left = []
    for _ in range(30):
        sup = subprocess.Popen([*SUPERVISE, "--parent", str(os.getpid()), "--", SLEEP, "30"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        children = _first_child(sup.pid)
        sup.send_signal(signal.SIGTERM)
        sup.wait(timeout=30)
        agent = children[0].pid
        try:
            wait_for(lambda: not _alive(agent), timeout_s=10, what="the agent to die with its supervisor")
        except AssertionError:
            left.append(agent)
            os.kill(agent, signal.SIGKILL)
    assert left == []


def test_a_rollout_sigkilled_under_a_hostile_agent_leaves_none_of_its_processes(tmp_path):
    """The agent of tests/rollout/agents/agent_scripts.py that escapes: a daemon in a session of its own
    (outside the agent's process group), a child in the group, then hangs. Its rollout (a process that
    starts the supervisor as rollout/agents/runner.py does, with its own pid) is SIGKILLed: the supervisor
    gets SIGTERM from the kernel and every process of the agent's dies, the escaped one too."""
    script = agent_scripts.write(tmp_path, "hang.py", agent_scripts.hanging_agent("hang"))
    out = tmp_path / "pids"
    rollout = subprocess.Popen(
        [sys.executable, "-c",
         "import os, signal, subprocess, sys; "
         f"subprocess.Popen({SUPERVISE!r} + ['--parent', str(os.getpid()), '--', sys.executable, {str(script)!r}]); "
         "signal.pause()"],
        env=dict(os.environ, AGENT_OUT=str(out)),
    )
    wait_for(lambda: out.exists() and len(out.read_text().split()) == 3, what="the agent to write its pids")
    pids = [int(p) for p in out.read_text().split()]
    rollout.kill()
    rollout.wait(timeout=30)
    wait_for(lambda: not any(_alive(p) for p in pids), timeout_s=30, what="every process of the agent to die")
