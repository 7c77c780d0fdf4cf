"""The trusted first step of every local sandbox run, executed *inside* the
sandbox by its own interpreter as ``python -I -S -c <this file's source>``.

It imports nothing but the standard library (``rlvr`` is not visible inside
bwrap), and does, in order:

1. read a length-prefixed JSON header from stdin (12 ASCII digits, then the
   JSON); the rest of stdin stays in the pipe for the program;
2. ``chdir`` to the work dir and write the program's files there;
3. set rlimits. ``RLIMIT_NPROC`` is set *here*, inside bwrap's new user
   namespace, so the kernel counts only this run's processes against it
   (processes are counted per user namespace and uid), which works for a
   non-root verifier too; set outside, it would count every process the
   verifier's uid owns;
4. confine itself with Landlock where the kernel has it (see
   ``landlock_restrict``; the rules come in the header): at level ``none``
   read-only system dirs and a read-write work dir; under bwrap, writes only
   to ``/work``, ``/tmp`` and ``/dev/shm``. Either way: no TCP bind or
   connect, no signals or abstract unix sockets beyond its own domain, and no
   ptrace of (or ``/proc/<pid>/environ`` of) any process outside it, bwrap's
   own pid 1 included;
5. replace the environment, print the run's marker on stdout and ``execv``
   the program. An exec failure exits 127 (like ``sh``), a program failure.

Not covered: isolation itself (namespaces come from bwrap, see ``local``).
"""

import json
import os
import resource
import sys

# Landlock ABI constants (include/uapi/linux/landlock.h). Syscall numbers
# 444-446 are the same on every architecture that has them.
_FS_FILE = (1 << 0) | (1 << 1) | (1 << 2)  # execute, write_file, read_file
_FS_READ = (1 << 0) | (1 << 2) | (1 << 3)  # execute, read_file, read_dir
_FS_ABI1 = (1 << 13) - 1  # every right ABI 1 knows (execute .. make_sym)
_FS_BY_ABI = {1: _FS_ABI1, 2: _FS_ABI1 | 1 << 13, 3: _FS_ABI1 | 3 << 13, 5: _FS_ABI1 | 7 << 13}


def landlock_abi(libc) -> int:
    """Landlock ABI version of this kernel, 0 when unavailable."""
    v = libc.syscall(444, None, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION
    return max(v, 0)


def landlock_restrict(read: list, write: list) -> int:
    """Confine this process (and what it execs) to reading ``read`` and
    reading/writing ``write``; no TCP, and (ABI >= 6) no signals or abstract
    unix sockets outside its domain. Returns the ABI used, 0 when the kernel
    has no Landlock (then nothing is confined)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = landlock_abi(libc)
    if abi == 0:
        return 0
    fs_all = _FS_BY_ABI[max(k for k in _FS_BY_ABI if k <= abi)]
    attr = (ctypes.c_uint64 * 3)(fs_all, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
    size = 8 * (3 if abi >= 6 else 2 if abi >= 4 else 1)
    ruleset = libc.syscall(444, ctypes.byref(attr), size, 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]

    for paths, rights in ((read, _FS_READ), (write, fs_all)):
        for path in paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a dir this distro lacks
            # A rule on a file may hold file rights only (execute, read,
            # write, truncate, ioctl_dev).
            allowed = rights & fs_all if os.path.isdir(path) else rights & fs_all & (_FS_FILE | 1 << 14 | 1 << 15)
            rule = PathBeneath(allowed, fd)
            if libc.syscall(445, ruleset, 1, ctypes.byref(rule), 0) < 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
            os.close(fd)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, needed unprivileged
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.syscall(446, ruleset, 0) < 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    os.close(ruleset)
    return abi


def _read(n: int) -> bytes:
    raw = b""
    while len(raw) < n:
        got = os.read(0, n - len(raw))
        if not got:
            sys.exit("rlvr-sandbox: short header")
        raw += got
    return raw


def main() -> None:
    h = json.loads(_read(int(_read(12))))
    os.chdir(h["dir"])
    for name, text in h["files"].items():
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        with open(name, "w", encoding="utf-8") as f:
            f.write(text)
    for name, soft, hard in h["rlimits"]:
        resource.setrlimit(getattr(resource, name), (soft, hard))
    if h.get("landlock") is not None:
        landlock_restrict(h["landlock"]["read"], h["landlock"]["write"])
    os.write(1, h["marker"].encode())
    try:
        os.execvpe(h["argv"][0], h["argv"], h["env"])
    except OSError as e:
        os.write(2, f"rlvr-sandbox: cannot exec {h['argv'][0]}: {e.strerror}\n".encode())
        os._exit(127)


if __name__ == "__main__":
    main()
