"""Processes that end when their parent does, even if the parent is SIGKILLed.

``rlvr-actor up`` starts every role, and the preparation step, in a session
of its own, so that a Ctrl-C reaches ``up`` alone and ``up`` stops them in
order (roles drain, the nats-server goes last). The price: if ``up`` dies
without running its handlers (SIGKILL, the OOM killer), nothing would stop
them, and a learner would go on training for nobody. ``up`` puts its pid in
``RLVR_UP_PID``; such a child calls ``follow_up()`` first thing, which asks
Linux (``prctl(PR_SET_PDEATHSIG)``) to send it SIGTERM when ``up`` dies, so
a role drains and exits as on any other stop. The verifier pool's workers
and the sandbox runner use ``die_with_parent`` (``rlvr.sandbox.reaper``) the
same way, with SIGKILL.

Not covered: the embedded nats-server, a Go binary that cannot ask for this
itself; it outlives a SIGKILLed ``up``, idle, with its store in the run dir.
Linux only; elsewhere both functions do nothing.
"""

from __future__ import annotations

import os
import signal

from rlvr.sandbox.reaper import die_with_parent

UP_PID_ENV = "RLVR_UP_PID"


def follow_up(sig: int = signal.SIGTERM) -> bool:
    """When started by ``up`` (``RLVR_UP_PID`` set), get ``sig`` when ``up`` dies.

    If ``up`` died before this call, no death signal would ever come: the
    parent is then no longer ``up``, and the signal is sent right away.
    Returns whether this process now follows ``up``.
    """
    parent = os.environ.get(UP_PID_ENV)
    if not parent or not die_with_parent(sig):
        return False
    if os.getppid() != int(parent):
        os.kill(os.getpid(), sig)
    return True


__all__ = ["UP_PID_ENV", "die_with_parent", "follow_up"]
