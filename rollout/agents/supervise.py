"""The process between the rollout and one command agent: it leaves nothing of the agent behind.

``python -P -m rlvr.rollout.agents.supervise --parent <rollout pid> -- <agent argv>``
(rollout/agents/runner.py starts it per episode, in a session of its own, with the agent's environment,
stdin, stdout and stderr):

1. It makes itself a child subreaper (``sandbox/reaper.py``): whatever the agent forks and orphans,
   even a daemon that called ``setsid``, is reparented to it, not to init.
2. It starts the agent in a process group of its own, which dies with the supervisor (``die_with``),
   and waits for it. The supervisor dies with the rollout in turn (SIGTERM when its parent exits).
   Neither death signal can be missed: a supervisor whose rollout died before it asked (its parent
   is no longer ``--parent``) starts nothing, and an agent whose supervisor died while starting it
   (between the fork and the request) exits before it runs. SIGTERM is blocked from the start and
   taken by the wait loop itself (``sigtimedwait``), never by an asynchronous handler: a stop that comes
   at any moment, while the agent is being started or just before the wait, kills the agent's group.
3. When the agent exits, or on SIGTERM (the rollout stopping it: a limit, wall time, a shutdown), it kills
   the agent's process group and then every orphan reparented to it, until none is left
   (``kill_orphans``), and exits with the agent's status (128 + the signal for an agent killed by one;
   127 when the agent could not be started, saying why on stderr).

It imports only the standard library and ``rlvr.sandbox.reaper``, so it starts in tens of milliseconds.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys

from rlvr.sandbox.reaper import become_subreaper, die_with, kill_orphans


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_SIGNALS = {signal.SIGTERM, signal.SIGCHLD}  # what the supervisor waits for, blocked and taken with sigtimedwait


def _start_agent(supervisor: int) -> None:
    """In the agent's process, before it runs: the signals the supervisor blocks are the agent's again,
    and it dies with the supervisor, which must still be there."""
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    if not die_with(supervisor):
        os._exit(128 + signal.SIGKILL)


def main(argv: list[str]) -> int:
    parent = None
    if argv[:1] == ["--parent"] and len(argv) > 1 and argv[1].isdigit():
        parent, argv = int(argv[1]), argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or parent is None:
        print("rlvr agent supervisor: usage: supervise --parent <pid> -- <agent command>", file=sys.stderr)
        return 2
    become_subreaper()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the rollout's to handle
    # SIGTERM (the rollout's stop, or its death) is never handled asynchronously: a Python handler can run
    # too late (a signal landing just before a blocking wait is only seen when the wait ends) or too early
    # (between the fork and the agent's pid being known). Blocked, it waits as pending until the loop
    # below takes it, however early it came.
    signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    if not die_with(parent, signal.SIGTERM):  # the rollout died before the request took effect
        return 143
    try:
        agent = subprocess.Popen(argv, start_new_session=True,  # noqa: PLW1509
                                 preexec_fn=functools.partial(_start_agent, os.getpid()))
    except OSError as e:
        print(f"rlvr agent supervisor: cannot start {argv[0]!r}: {e}", file=sys.stderr)
        return 127
    try:
        while (status := agent.poll()) is None:
            # SIGCHLD: the agent (or an orphan of its) exited; the timeout only bounds a coalesced one.
            got = signal.sigtimedwait(_SIGNALS, 1.0)
            if got is not None and got.si_signo == signal.SIGTERM:
                _kill_group(agent.pid)  # the rollout stops the agent: its whole group, at once
    finally:
        _kill_group(agent.pid)
        kill_orphans(set())  # every child left is an orphan of the agent's (the agent itself is reaped)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
