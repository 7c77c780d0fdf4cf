"""Which CPUs each process of an ``up`` run may use: the learner's to itself, the rest shared.

With ``up.learner_threads = N`` and ``up.pin_learner`` (the default), ``up`` gives the learner the
last N of the CPUs it may use itself and every other process of the run (rollout, verifiers and
their pool workers, nats-server) the others. On the built-in example's 2 cores that is one core
each: the learner's step no longer shares its core and caches with generation, and nats-server's Go
runtime stops spinning on a second core (docs/benchmarks.md, "The learner on a core of its own").

A role child pins itself from ``RLVR_CPUS`` first thing, before torch starts a thread (every thread
it makes then inherits the set). nats-server is a Go binary with threads from its first
millisecond, so each of its threads is pinned once it is ready (the threads it makes later inherit)
and ``GOMAXPROCS`` tells its runtime how many it has.

Nothing is pinned when the split would leave either side without a CPU (N = 0, or N at least the
CPUs there are), or where the platform has no ``sched_setaffinity`` (macOS).
"""

from __future__ import annotations

import os
from pathlib import Path

from msgspec import Struct

CPUS_ENV = "RLVR_CPUS"


class CpuSplit(Struct, frozen=True):
    learner: frozenset[int]
    others: frozenset[int]

    def env(self, role: str) -> dict[str, str]:
        """The variable that makes a role child pin itself to its side."""
        return {CPUS_ENV: format_cpus(self.learner if role == "learn" else self.others)}

    def describe(self) -> str:
        return f"learner on CPU {format_cpus(self.learner)}, every other process on CPU {format_cpus(self.others)}"


def usable_cpus() -> frozenset[int] | None:
    """The CPUs this process may run on (its affinity, a container's cpuset); None where unknown."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return frozenset(os.sched_getaffinity(0))


def split_cpus(learner_threads: int, enabled: bool, usable: frozenset[int] | None) -> CpuSplit | None:
    """The learner's CPUs (the last ``learner_threads`` of ``usable``) and everyone else's, or None
    when nothing should be pinned."""
    if not enabled or learner_threads <= 0 or usable is None or len(usable) <= learner_threads:
        return None
    ordered = sorted(usable)
    return CpuSplit(learner=frozenset(ordered[-learner_threads:]), others=frozenset(ordered[:-learner_threads]))


def split_for(up) -> CpuSplit | None:
    """The split an ``up`` run uses, from its ``[up]`` section (``learner_threads``, ``pin_learner``)."""
    return split_cpus(up.learner_threads, up.pin_learner, usable_cpus())


def format_cpus(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def parse_cpus(text: str) -> frozenset[int]:
    """``"0,2,3"`` -> {0, 2, 3}; a ValueError naming the variable for anything else."""
    try:
        cpus = frozenset(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        cpus = frozenset()
    if not cpus or min(cpus) < 0:
        raise ValueError(f"{CPUS_ENV}={text!r}: expected CPU numbers separated by commas, such as 0,1")
    return cpus


def pin_self_from_env() -> None:
    """Pin this process to ``RLVR_CPUS`` when it is set (``up`` sets it for its role children); a
    ValueError naming the variable when it is malformed or names no CPU this process may use."""
    text = os.environ.get(CPUS_ENV, "")
    if not text or not hasattr(os, "sched_setaffinity"):
        return
    cpus = parse_cpus(text)
    allowed = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as e:  # none of them exists here, or the cgroup's cpuset forbids them all
        raise ValueError(f"{CPUS_ENV}={text!r}: this process may not run there ({e.strerror}); "
                         f"it may run on CPU {format_cpus(frozenset(allowed))}") from None


def pin_process(pid: int, cpus: frozenset[int]) -> int:
    """Pin every thread of process ``pid`` to ``cpus``; how many threads were pinned. A thread that
    ended meanwhile is skipped; a process that ended pins nothing."""
    if not hasattr(os, "sched_setaffinity"):
        return 0
    pinned = 0
    try:
        tids = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        tids = [pid]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
            pinned += 1
        except (ProcessLookupError, PermissionError):
            continue
    return pinned


__all__ = ["CPUS_ENV", "CpuSplit", "format_cpus", "parse_cpus", "pin_process", "pin_self_from_env", "split_cpus",
           "split_for", "usable_cpus"]
