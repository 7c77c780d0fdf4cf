"""Finding and killing what a run at sandbox level ``none`` left behind.

Without a pid namespace a program can escape its process group (``setsid``,
double fork). The local sandbox therefore makes its own process a *child
subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): every orphan of the run is
reparented to it, not to init, so after the run it kills every child that was
not there before (``kill_orphans``), repeating until none is left. A root
verifier also kills every process of the run's per-run uid (``kill_uid``).

A process that uses level ``none`` must run one sandboxed program at a time
(as a pool worker does): every new child counts as the run's.

Not covered: bwrap (its pid namespace does this in the kernel) and docker.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent exits (a pool
    worker, a sandbox runner, a role started by ``up``). Returns whether the
    request was accepted; elsewhere than Linux, does nothing."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig)) == 0
    except (OSError, AttributeError):
        return False


def die_with(parent: int, sig: int = signal.SIGKILL) -> bool:
    """``die_with_parent``, and whether ``parent`` is still this process's parent once the request holds.

    False: the parent died before the request took effect (between its fork and this call), so its
    death signal will never come, and the caller must stop now (a supervisor its rollout abandoned,
    an agent its supervisor abandoned). Elsewhere than Linux, only the parent is compared."""
    die_with_parent(sig)
    return os.getppid() == parent


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def processes_of(ident: int, children: bool = False) -> list[int]:
    """Pids whose real uid is ``ident``, or (``children=True``) whose parent
    is pid ``ident``."""
    field = "PPid:" if children else "Uid:"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                for line in f:
                    if line.startswith(field):
                        if int(line.split()[1]) == ident:
                            found.append(int(name))
                        break
        except (OSError, ValueError):
            continue  # gone meanwhile
    return found


def tasks_of(uid: int) -> int:
    """Threads owned by ``uid`` (what ``RLIMIT_NPROC`` counts, threads included)."""
    total = 0
    for pid in processes_of(uid):
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("Threads:")), 1)
        except (OSError, ValueError):
            continue
    return total


def kill_orphans(known: set[int], rounds: int = 50) -> None:
    """SIGKILL and reap every child of this process not in ``known``, until
    none is left (children of a killed child are reparented here in turn)."""
    me = os.getpid()
    for _ in range(rounds):
        strays = [p for p in processes_of(me, children=True) if p not in known]
        if not strays:
            return
        for pid in strays:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in strays:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def kill_uid(uid: int) -> None:
    """Kill every process of ``uid`` (a per-run uid owns nothing else)."""
    for pid in processes_of(uid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


__all__ = ["become_subreaper", "kill_orphans", "kill_uid", "processes_of", "tasks_of"]
