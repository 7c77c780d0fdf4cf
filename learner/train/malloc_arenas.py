"""glibc malloc's arenas, capped in the learner's process.

glibc gives threads that allocate at once arenas of their own (up to 8 per core), and memory freed in
an arena stays with that arena: a heap is given back to the system only from its top. The learner
allocates from several threads (the training step's worker, the checkpoint and export writers, the
weights publisher), and a checkpoint copies the whole optimizer state on its own thread. On SmolLM2-135M
(examples/smollm2.toml, 14 steps, `checkpoint_every = 10`) the learner's RSS went from 6.6-7.1 GB to
10.1-10.6 GB at the step-10 checkpoint and stayed there to the end; with two arenas it stayed at
6.5-6.9 GB through the same checkpoint, its peak 7.35 GB against 11.58 GB, and its step as long
(median train 33.1 s against 32.6 s, one run each: docs/benchmarks.md, "Where the memory goes").

``MALLOC_ARENA_MAX`` in the environment wins (glibc reads it at start): set it to 0 for glibc's own
default. Other C libraries (musl) have no such arenas; there the call is skipped.
"""

from __future__ import annotations

import ctypes
import os
import sys

LEARNER_ARENAS = 2
_M_ARENA_MAX = -8  # <malloc.h>


_applied: int | None = None


def cap_malloc_arenas(arenas: int = LEARNER_ARENAS) -> int | None:
    """Cap this process's malloc arenas at ``arenas`` (glibc's ``mallopt(M_ARENA_MAX)``); returns the
    cap set, or None where it was left alone (``MALLOC_ARENA_MAX`` set, not glibc).

    Call it before any thread but the main one allocates: glibc fixes its arena limit the first time a
    thread needs an arena, and a cap set after that changes nothing. Set in ``--role learn``'s
    ``main`` (cli/main.py); a cap set in the role's runtime, after its lifeline thread had started,
    left the learner at 11.4 GB on the same run."""
    global _applied
    if "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    if mallopt(_M_ARENA_MAX, arenas) == 1:
        _applied = arenas
    return _applied


def applied_cap() -> int | None:
    """The cap ``cap_malloc_arenas`` set in this process, if it did."""
    return _applied


__all__ = ["LEARNER_ARENAS", "applied_cap", "cap_malloc_arenas"]
