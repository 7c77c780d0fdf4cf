"""What an environment's stuck call started: found by the time it started, killed when the episode ends.

Environments run in the rollout's own process (``runner.EnvThread``). A step or a tool that starts a
process and then hangs (``subprocess.Popen`` and a blocking wait, ``os.system``) times out as
``env_timeout``, but its thread never comes back to run ``close()``, and the process it started
would live on as the rollout's child, one more for every hung episode. Only the rollout can clean
this up, and it must not kill what belongs to others (another episode's compiler, an agent's
supervisor, a verifier or vLLM worker started by the rollout itself).

The link between a process and its episode is the moment it started:

- An audit hook (``sys.addaudithook``, installed once per process) notes every process start
  Python announces (``subprocess.Popen``, ``os.system``, ``os.fork``, ``os.forkpty``,
  ``os.posix_spawn``, ``os.spawn``), with the time (``CLOCK_BOOTTIME``, the kernel's clock for a
  process's start time) and the episode whose code made it: a context variable that
  ``EnvThread.call`` sets in the task that runs the environment's code, which Python copies into
  everything that task starts (tasks, ``anyio.to_thread`` workers).
- When an episode ends with its environment's thread stuck, ``reap`` kills the rollout's children
  (and their children) that started within ``WINDOW_S`` after one of that episode's notes and
  near no other note, from any episode or none, except episodes already reaped (abandoned: what
  they started is to be killed either way). A child that matches two owners still running is
  left alone and logged: a wrong kill is worse than a leftover. So when the n episodes of a task
  hang in the same step together (their turns are generated as one batch, their steps start
  within milliseconds), the first reaps leave the shared-window children, and the last one
  kills them all.

Not covered: a process that leaves the rollout's tree (a double fork with ``setsid``) before the
reap, and one started through a path Python does not announce. An environment that manages
processes should end them in ``close()``; one that runs model-written code should use the
sandbox (``rlvr.sandbox``), whose runs are reaped by group and subreaper.
"""

from __future__ import annotations

import collections
import contextvars
import os
import signal
import sys
import threading
import time
import weakref

import structlog

from rlvr.sandbox.reaper import processes_of

log = structlog.get_logger()

SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn"})
# A process starts within milliseconds of its announcement (the same thread forks right after it);
# the kernel's start time is in clock ticks (10 ms at 100 Hz), rounded down.
WINDOW_S = (-0.03, 0.25)

_owner: contextvars.ContextVar[object | None] = contextvars.ContextVar("rlvr_env_spawn_owner", default=None)
_notes: collections.deque[tuple[float, object | None]] = collections.deque(maxlen=8192)
_abandoned: weakref.WeakSet = weakref.WeakSet()  # owners reaped: their processes are no one else's to keep
_installed = threading.Lock()
_hooked = False
_TICKS = os.sysconf("SC_CLK_TCK")


def now() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _hook(event: str, _args) -> None:
    if event in SPAWN_EVENTS:
        _notes.append((now(), _owner.get()))


def install() -> None:
    """Start noting process starts (once per process; audit hooks cannot be removed)."""
    global _hooked
    with _installed:
        if not _hooked:
            sys.addaudithook(_hook)
            _hooked = True


def own(owner: object) -> None:
    """Mark the running task (and what it starts) as ``owner``'s code."""
    _owner.set(owner)


def _started(pid: int) -> float | None:
    """Seconds since boot at which ``pid`` started (``/proc/PID/stat`` field 22)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[19]) / _TICKS
    except (OSError, IndexError, ValueError):
        return None


def _near(t: float, notes: list[float]) -> bool:
    return any(n + WINDOW_S[0] <= t <= n + WINDOW_S[1] for n in notes)


def started_by(owner: object, since: float) -> list[int]:
    """The rollout's children that ``owner`` started (and no one else could have) since ``since``."""
    notes = [(t, o) for t, o in list(_notes) if t >= since + WINDOW_S[0]]
    mine = [t for t, o in notes if o is owner]
    if not mine:
        return []
    others = [t for t, o in notes if o is not owner and (o is None or o not in _abandoned)]
    found = []
    for pid in processes_of(os.getpid(), children=True):
        t = _started(pid)
        if t is None or not _near(t, mine):
            continue
        if _near(t, others):
            log.warning("env_child_ambiguous", pid=pid, note="started as another owner's process did: left alone")
            continue
        found.append(pid)
    return found


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, children first."""
    out = []
    for child in processes_of(pid, children=True):
        out += _tree(child)
    return out + [pid]


def reap(owner: object, since: float, episode: str) -> int:
    """SIGKILL what ``owner`` started since ``since`` (with its descendants); reap the rollout's own
    children among them. Returns how many processes were killed."""
    _abandoned.add(owner)
    killed = 0
    for child in started_by(owner, since):
        for pid in _tree(child):
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        try:
            os.waitpid(child, 0)  # ours: no zombie left (the stuck thread's Popen then sees ECHILD)
        except ChildProcessError:
            pass
    if killed:
        log.warning("env_children_killed", episode=episode, killed=killed,
                    note="the environment's thread was stuck; what it had started was killed")
    return killed


__all__ = ["install", "now", "own", "reap", "started_by"]
