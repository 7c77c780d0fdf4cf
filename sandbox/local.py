"""The ``local`` sandbox: untrusted programs in a child process tree on this
host, at one of two explicit isolation levels (``isolation=``; nothing is
picked silently, see ``rlvr.sandbox.levels`` for ``auto``):

- ``bwrap`` (the default): bubblewrap in new user, pid, network, ipc, uts and
  mount namespaces. A verifier that is not root needs nothing more than
  unprivileged user namespaces; a root verifier runs bwrap as a random
  unprivileged uid drawn per run. Inside: a read-only root holding only
  ``/usr`` (plus the ``/bin``, ``/lib*`` links, ``ld.so.cache``,
  ``localtime``) and the interpreter's prefix; a fresh ``/proc`` of its own
  pid namespace; a minimal ``/dev``; size-capped tmpfs ``/work`` (the work dir,
  ``work_mb``), ``/tmp`` and ``/dev/shm`` (``tmp_mb`` each). Nothing else of
  the host is mounted: no ``/etc``, no ``/home``, no ``/run`` or
  ``/var/run/secrets`` (a pod's service-account token), no docker socket.
  When the program exits, or the run is killed, bwrap's pid 1 goes and the
  kernel kills every process left in the namespace (``setsid`` included).
- ``none``: no namespaces, for hosts that forbid them; it runs only with
  ``allow_unsandboxed=True``. The program is confined by Landlock where the
  kernel has it (reads: system dirs; writes: its work dir; no TCP; no signals,
  ptrace or ``/proc/<pid>/environ`` outside itself), the work dir is a
  host directory (not size-capped: there is no unprivileged way), and the
  sandbox makes its own process a child subreaper, so that every orphan of
  the run (``setsid`` included) is reparented to it and killed after the run.

Always: the trusted prelude (``prelude.py``, run by the sandbox's interpreter)
writes the files, sets rlimits (CPU, address space, file size, open files,
processes, no core) from inside the namespaces, applies Landlock where the
kernel has it (under bwrap too: the program cannot ptrace or signal bwrap's
pid 1), replaces the environment with
a fixed one (PATH, HOME, LANG, TMPDIR, PYTHON* flags) and prints a per-run
marker just before it ``exec``s the program, so a sandbox failure
(``error``) is told from a program that failed: the program starts after the
marker, so it can neither forge nor suppress it. stdout and stderr are read
in chunks by a ``selectors`` loop in this thread; at ``output_bytes`` on
either stream the run is killed and marked ``output_truncated``.

Not covered: seccomp filters and cgroup memory accounting (the docker backend
has cgroups). ``memory_exceeded`` is inferred from a ``MemoryError`` /
allocation failure on stderr.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from functools import lru_cache
from pathlib import Path

from rlvr.sandbox import prelude
from rlvr.sandbox.base import (
    ExecutionResult,
    SandboxLimits,
    SandboxUnavailableError,
    SandboxUnsandboxedError,
    check_file_names,
)
from rlvr.sandbox.pump import pump
from rlvr.sandbox.reaper import become_subreaper, kill_orphans, kill_uid, processes_of, tasks_of

LEVELS = ("bwrap", "none")
_PRELUDE = Path(prelude.__file__).read_text(encoding="utf-8")
_MEMORY_MARKS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc")
_SYSTEM_READ = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache",
                "/etc/localtime", "/etc/python3", "/dev/zero", "/dev/urandom", "/dev/random")


def _default_python() -> str:
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(cand, os.X_OK):
            return cand
    found = shutil.which("python3")
    if found is None:
        raise SandboxUnavailableError("no python3 interpreter found for the local sandbox")
    return os.path.realpath(found)


class LocalSandbox:
    def __init__(
        self,
        isolation: str = "bwrap",
        python: str | None = None,
        uid_base: int = 1_000_000,
        tmp_mb: int = 64,
        work_mb: int = 64,
        allow_unsandboxed: bool = False,
    ) -> None:
        if isolation not in LEVELS:
            raise SandboxUnavailableError(f"local isolation {isolation!r} does not exist (levels: bwrap, none)")
        if isolation == "none" and not allow_unsandboxed:
            raise SandboxUnsandboxedError(
                "sandbox level 'none' runs untrusted code without namespaces; set "
                "[verify.sandbox] allow_unsandboxed = true to allow it on purpose"
            )
        self.python = python or _default_python()
        self.isolation = isolation
        self.tmp_mb, self.work_mb = tmp_mb, work_mb
        self._root = os.geteuid() == 0
        self._uid_base = uid_base
        self._base = ""  # host dir of the work dirs, level none only (bwrap's /work is a tmpfs)
        if isolation == "none":
            self._base = tempfile.mkdtemp(prefix="rlvr-sbx-")
            os.chmod(self._base, 0o711)  # traversable by the run's uid, not listable
            self._finalizer = weakref.finalize(self, shutil.rmtree, self._base, True)
            become_subreaper()
        why = _probe(self)
        if why:
            self.close()
            raise SandboxUnavailableError(f"{isolation}: {why}")
        self.why = self._describe()

    def _describe(self) -> str:
        if self.isolation == "none":
            return describe_none(self._root)
        who = "a per-run unprivileged uid (verifier is root)" if self._root else f"uid {os.geteuid()} in an unprivileged user namespace (verifier is not root)"
        return (f"bwrap: user, pid, net, ipc, mount namespaces as {who}; "
                f"/work {self.work_mb} MiB, /tmp and /dev/shm {self.tmp_mb} MiB each, no network")

    # -- one run ---------------------------------------------------------------
    def run(
        self, files: dict[str, str], argv: list[str], stdin: str, limits: SandboxLimits
    ) -> ExecutionResult:
        check_file_names(files)
        t0 = time.monotonic()
        uid = self._uid_base + secrets.randbelow(1 << 20) if self._root else None
        argv = [self.python, *argv[1:]] if argv and argv[0] in ("python", "python3") else argv
        work = None
        if self.isolation == "none":
            work = tempfile.mkdtemp(dir=self._base)
            if uid is not None:
                os.chown(work, uid, uid)
        try:
            return self._run(work, files, argv, stdin, limits, uid, t0)
        finally:
            if work is not None:
                shutil.rmtree(work, ignore_errors=True)

    def close(self) -> None:
        if self._base:
            shutil.rmtree(self._base, ignore_errors=True)
        if hasattr(self, "_finalizer"):
            self._finalizer.detach()

    def _run(
        self, work: str | None, files: dict[str, str], argv: list[str], stdin: str,
        limits: SandboxLimits, uid: int | None, t0: float,
    ) -> ExecutionResult:
        marker = f"rlvr-sandbox-ready-{secrets.token_hex(8)}\n"
        inner = work or "/work"
        header = {
            "dir": inner,
            "files": files,
            "argv": argv,
            "env": _scrubbed_env(inner, "/tmp" if work is None else inner),
            "rlimits": self._rlimits(limits, uid),
            "landlock": _landlock_rules(work, self.python),
            "marker": marker,
        }
        raw = json.dumps(header).encode()
        payload = b"%012d" % len(raw) + raw + stdin.encode()
        interp = [self.python, "-I", "-S", "-c", _PRELUDE]
        cmd = [*bwrap_args(self.python, self.work_mb, self.tmp_mb), *interp] if work is None else interp
        known = set(processes_of(os.getpid(), children=True)) if work is not None else set()
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=_scrubbed_env(inner, "/tmp"),
                cwd=work or "/",
                start_new_session=True,
                **({"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}),
            )
        except OSError as e:
            return ExecutionResult(None, "", "", False, False, False, time.monotonic() - t0, error=f"spawn failed: {e}")
        out, err, timed_out, truncated = pump(proc, payload, limits.output_bytes, t0 + limits.wall_s)
        code = proc.wait()
        if work is not None:  # no pid namespace: hunt down what the run left
            kill_orphans(known)
            if uid is not None:
                kill_uid(uid)
        started = out.startswith(marker.encode())
        stdout = out[len(marker) :].decode(errors="replace") if started else ""
        stderr = err.decode(errors="replace")
        wall = time.monotonic() - t0
        if not started and not timed_out and not truncated:
            return ExecutionResult(code, stdout, stderr, False, False, False, wall, error=f"sandbox setup failed ({self.isolation}): {stderr[-500:]}")
        if code is not None and code > 128 and work is None:
            code = -(code - 128)  # bwrap reports a signalled child as 128+signal
        timed_out = timed_out or code == -signal.SIGXCPU
        memory = any(m in stderr for m in _MEMORY_MARKS)
        return ExecutionResult(code, stdout, stderr, timed_out, memory, truncated, wall)

    def _rlimits(self, limits: SandboxLimits, uid: int | None) -> list[list]:
        mb = 1 << 20
        if self.isolation == "bwrap":
            # Counted in the run's own user namespace: bwrap's pid 1 plus the program's tree.
            nproc = limits.processes + 1
        elif uid is not None:
            nproc = limits.processes  # a per-run uid owns nothing else
        else:
            # No namespace, same uid as the verifier: the kernel counts all of
            # its tasks (threads too), so allow those that exist now plus the budget.
            nproc = tasks_of(os.getuid()) + limits.processes
        return [
            ["RLIMIT_CPU", limits.cpu_s, limits.cpu_s + 1],
            ["RLIMIT_AS", limits.memory_mb * mb, limits.memory_mb * mb],
            ["RLIMIT_FSIZE", limits.file_size_mb * mb, limits.file_size_mb * mb],
            ["RLIMIT_NOFILE", limits.open_files, limits.open_files],
            ["RLIMIT_NPROC", nproc, nproc],
            ["RLIMIT_CORE", 0, 0],
        ]


def describe_none(root: bool) -> str:
    """What level ``none`` contains on this host (it depends on Landlock)."""
    who = "a per-run unprivileged uid" if root else f"the verifier's own uid {os.geteuid()}"
    abi = _landlock_abi()
    if abi == 0:
        return f"none (allowed on purpose): no namespaces and no Landlock, as {who}: files, network and signals are OPEN"
    gaps = [g for g, ok in (("TCP open", abi >= 4), ("signals and abstract sockets open", abi >= 6)) if not ok]
    return (f"none (allowed on purpose): no namespaces, as {who}; Landlock ABI {abi} confines files to the work dir"
            + (f" ({'; '.join(gaps)})" if gaps else ", no TCP, no signals outside")
            + "; work dir not size-capped, UDP not blocked")


def _landlock_rules(work: str | None, python: str) -> dict[str, list[str]]:
    """What the program may read and write. Under bwrap (``work`` is None)
    the namespaces already hide the host; Landlock is added there too so the
    program cannot ptrace or signal bwrap's own pid 1 (outside its domain)."""
    if work is None:
        return {"read": ["/"], "write": ["/work", "/tmp", "/dev/shm", "/dev/null"]}
    return {"read": [*_SYSTEM_READ, _python_prefix(python)], "write": [work, "/dev/null"]}


def _scrubbed_env(home: str, tmp: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONUNBUFFERED": "1",
    }


def bwrap_args(python: str, work_mb: int, tmp_mb: int) -> list[str]:
    """bwrap's argv up to ``--``: all that the sandbox sees of the host (a
    test checks that nothing else, e.g. ``/run``, is bound)."""
    mb = 1 << 20
    args = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for f in ("/etc/ld.so.cache", "/etc/localtime"):
        args += ["--ro-bind-try", f, f]
    prefix = _python_prefix(python)
    if not prefix.startswith("/usr/"):
        args += ["--ro-bind", prefix, prefix]
    args += [
        "--proc", "/proc", "--dev", "/dev",
        "--size", str(tmp_mb * mb), "--tmpfs", "/dev/shm",
        "--size", str(tmp_mb * mb), "--tmpfs", "/tmp",
        "--size", str(work_mb * mb), "--tmpfs", "/work",
        # bwrap's own root and /dev are tmpfs too: read-only, so the only
        # writable places are the three capped ones above.
        "--remount-ro", "/dev", "--remount-ro", "/",
        "--chdir", "/work", "--",
    ]
    return args


@lru_cache(maxsize=8)
def _python_prefix(python: str) -> str:
    real = os.path.realpath(python)
    return os.path.dirname(os.path.dirname(real)) + "/"


@lru_cache(maxsize=1)
def _landlock_abi() -> int:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return prelude.landlock_abi(libc)


def _probe(box: LocalSandbox) -> str:
    """Empty string when ``box`` works here, else the reason it does not."""
    if box.isolation == "bwrap" and shutil.which("bwrap") is None:
        return "bwrap not installed (apt-get install bubblewrap)"
    if not os.access(box.python, os.X_OK):
        return f"no interpreter at {box.python}"
    res = box.run({}, ["python", "-I", "-S", "-c", "print('up')"], "", SandboxLimits(wall_s=20.0))
    if res.error or res.stdout.strip() != "up":
        return (res.error or f"exit {res.exit_code}: {res.stderr.strip()[-300:]}") or "no output"
    return ""


__all__ = ["LEVELS", "LocalSandbox", "bwrap_args", "describe_none"]
