"""The process between the rollout and one command agent: it leaves nothing of the agent behind.

``python -P -m rlvr.rollout.agents.supervise -- <agent argv>`` (rollout/agents/runner.py starts it per
episode, in a session of its own, with the agent's environment, stdin, stdout and stderr):

1. It makes itself a child subreaper (``sandbox/reaper.py``): whatever the agent forks and orphans,
   even a daemon that called ``setsid``, is reparented to it, not to init.
2. It starts the agent in a process group of its own, which dies with the supervisor (``die_with_parent``),
   and waits for it. The supervisor dies with the rollout in turn (SIGTERM when its parent exits).
3. When the agent exits, or on SIGTERM (the rollout stopping it: a limit, wall time, a shutdown), it kills
   the agent's process group and then every orphan reparented to it, until none is left
   (``kill_orphans``), and exits with the agent's status (128 + the signal for an agent killed by one;
   127 when the agent could not be started, saying why on stderr).

It imports only the standard library and ``rlvr.sandbox.reaper``, so it starts in tens of milliseconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from rlvr.sandbox.reaper import become_subreaper, die_with_parent, kill_orphans


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("rlvr agent supervisor: no agent command given", file=sys.stderr)
        return 2
    become_subreaper()
    die_with_parent(signal.SIGTERM)
    if os.getppid() == 1:  # the rollout died before the request above took effect
        return 143
    agent: subprocess.Popen | None = None

    def stop(signum, frame) -> None:  # the rollout stops the agent: its whole group, at once
        if agent is not None:
            _kill_group(agent.pid)
        else:
            os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the rollout's to handle
    try:
        agent = subprocess.Popen(argv, start_new_session=True, preexec_fn=die_with_parent)  # noqa: PLW1509
    except OSError as e:
        print(f"rlvr agent supervisor: cannot start {argv[0]!r}: {e}", file=sys.stderr)
        return 127
    try:
        status = agent.wait()
    finally:
        _kill_group(agent.pid)
        kill_orphans(set())  # every child left is an orphan of the agent's (the agent itself is reaped)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
