"""The learner's process caps glibc's malloc arenas (learner/train/malloc_arenas.py): memory a checkpoint
frees on its own thread no longer stays with that thread's arena for the rest of the run.

Each check runs in a fresh interpreter, whose threads each allocate once; glibc's own ``malloc_info``
then counts the heaps (one per arena) it made.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's arenas: Linux only")

_PROBE = textwrap.dedent(
    """
    import ctypes, re, sys, tempfile, threading
    from rlvr.learner.train.malloc_arenas import cap_malloc_arenas

    cap = cap_malloc_arenas() if sys.argv[1] == "cap" else None
    held, start = [], threading.Barrier(8)

    def work():
        start.wait()  # all alive at once: each is a thread glibc must find an arena for
        held.append([bytearray(64 << 10) for _ in range(16)])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    libc = ctypes.CDLL("libc.so.6")
    libc.fopen.restype = ctypes.c_void_p
    with tempfile.NamedTemporaryFile(suffix=".xml") as f:
        fp = libc.fopen(f.name.encode(), b"w")
        libc.malloc_info(0, ctypes.c_void_p(fp))
        libc.fclose(ctypes.c_void_p(fp))
        heaps = len(re.findall(r'<heap nr="', open(f.name).read()))
    print(cap, heaps)
    """
)


def _probe(mode: str, **env: str) -> tuple[str, int]:
    base = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], env={**base, **env}, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    cap, heaps = out.stdout.split()
    return cap, int(heaps)


def test_the_cap_keeps_eight_allocating_threads_to_two_arenas():
    assert _probe("cap") == ("2", 2)


def test_without_the_cap_glibc_gives_the_threads_arenas_of_their_own():
    cap, heaps = _probe("none")  # what the cap is for: glibc's default, 8 arenas a core
    assert cap == "None" and heaps > 2


def test_malloc_arena_max_in_the_environment_wins():
    cap, heaps = _probe("cap", MALLOC_ARENA_MAX="0")  # 0: glibc's own default
    assert cap == "None" and heaps > 2
