"""The ``local`` sandbox: untrusted programs in a child process tree, isolated
with bubblewrap, else ``unshare``, else rlimits and a throwaway uid only.

Isolation levels (``isolation=``; ``auto`` picks the first that works here,
probed once per process, and ``self.isolation`` / ``self.why`` say which and
why):

- ``bwrap``: ``bwrap --unshare-all --unshare-user --disable-userns``, a new
  root holding only read-only ``/usr`` (plus the ``/bin``, ``/lib*`` links,
  ``ld.so.cache``), fresh ``/proc``, ``/dev`` and ``/tmp``, the work dir at
  ``/work``, no network, no ``/etc/shadow`` or anything else from ``/etc``.
- ``unshare``: new mount, network, pid, ipc and uts namespaces (plus a user
  namespace when not root). A tmpfs covers every world-writable dir (``/tmp``,
  ``/var/tmp``, ``/dev/shm``, ``/run/lock``); the work dir is moved back in
  place. The host's read-only view of ``/`` stays visible, so secrets rely on
  file permissions plus the unprivileged uid below.
- ``none``: no namespaces (they are not permitted, e.g. inside some
  containers); everything else below still applies, but the network is open.

Always, whatever the level:
- a fresh private work dir per run, deleted afterwards;
- when the caller is root, the program runs as a random unprivileged uid/gid
  drawn per run (no passwd entry): it cannot read root's files
  (``/etc/shadow``), write outside its work dir, or signal the caller, and
  ``RLIMIT_NPROC`` is enforced (the kernel ignores it for uid 0) and counted
  for this run alone;
- rlimits through ``prlimit``: CPU (SIGXCPU at ``cpu_s``), address space,
  file size, open files, processes, no core dumps;
- an environment built from scratch (PATH, HOME, LANG, TMPDIR, PYTHON*
  flags), so no host secret reaches the program;
- a new session, killed as a whole group at the wall-clock deadline; the pid
  namespace (bwrap/unshare) takes every descendant with it; at level ``none``
  every process of the run's uid is killed afterwards;
- stdout and stderr read in chunks by a ``selectors`` loop in this thread
  (no reader threads); at ``output_bytes`` on either stream the run is killed
  and marked ``output_truncated``.

A setup marker (a random token that ``/bin/sh`` prints as the first line of
stdout just before it execs the program; stripped from ``stdout``) tells a
sandbox failure (``error``) from a program that failed: the program starts
after the marker, so it can neither forge nor suppress it.

Not covered: seccomp filters and cgroup memory accounting (the docker backend
has cgroups). ``memory_exceeded`` is inferred from a ``MemoryError`` /
allocation failure on stderr.
"""

from __future__ import annotations

import os
import secrets
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from functools import lru_cache
from typing import Literal

from rlvr.verify.sandbox.base import (
    ExecutionResult,
    SandboxLimits,
    SandboxUnavailableError,
    check_file_names,
)

Isolation = Literal["auto", "bwrap", "unshare", "none"]
_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
_STAGE = "/mnt"  # an empty dir every distro ships; the work dir waits here while /tmp is covered
_MEMORY_MARKS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc")
_GRACE_S = 1.0  # how long to drain pipes after the program is gone


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
        isolation: Isolation = "auto",
        python: str | None = None,
        uid_base: int = 1_000_000,
    ) -> None:
        self.python = python or _default_python()
        self._root = os.geteuid() == 0
        self._uid_base = uid_base
        self._base = tempfile.mkdtemp(prefix="rlvr-sbx-")
        os.chmod(self._base, 0o711)  # traversable by the run's uid, not listable
        self._finalizer = weakref.finalize(self, shutil.rmtree, self._base, True)
        order = ("bwrap", "unshare", "none") if isolation == "auto" else (isolation,)
        reasons = []
        for level in order:
            why = _probe(level, self._root, self.python)
            if why == "":
                self.isolation: str = level
                break
            reasons.append(f"{level}: {why}")
        else:
            self.close()
            raise SandboxUnavailableError("; ".join(reasons))
        self.why = "; ".join(reasons) or f"{self.isolation} works here"

    # -- one run ---------------------------------------------------------------
    def run(
        self, files: dict[str, str], argv: list[str], stdin: str, limits: SandboxLimits
    ) -> ExecutionResult:
        check_file_names(files)
        t0 = time.monotonic()
        uid = self._uid_base + secrets.randbelow(1 << 20) if self._root else None
        work = tempfile.mkdtemp(dir=self._base)
        try:
            _write_files(work, files, uid)
            argv = [self.python, *argv[1:]] if argv and argv[0] in ("python", "python3") else argv
            return self._run_in(work, argv, stdin, limits, uid, t0)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def close(self) -> None:
        shutil.rmtree(self._base, ignore_errors=True)
        if hasattr(self, "_finalizer"):
            self._finalizer.detach()

    def _run_in(
        self, work: str, argv: list[str], stdin: str, limits: SandboxLimits, uid: int | None, t0: float
    ) -> ExecutionResult:
        token = f"rlvr-sandbox-ready-{secrets.token_hex(8)}\n"
        inner_work = "/work" if self.isolation == "bwrap" else work
        cmd = _command(self.isolation, self._root, work, uid, limits, self.python, token, argv)
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=_scrubbed_env(inner_work),
                cwd=work,
                start_new_session=True,
                # Under bwrap or "none" the whole chain runs as the run's uid;
                # under unshare the namespaces need root, setpriv drops later.
                **({"user": uid, "group": uid, "extra_groups": []} if uid and self.isolation != "unshare" else {}),
            )
        except OSError as e:
            return ExecutionResult(None, "", "", False, False, False, time.monotonic() - t0, error=f"spawn failed: {e}")
        out, err, timed_out, truncated = _pump(proc, stdin.encode(), limits, t0 + limits.wall_s)
        code = proc.wait()
        if self.isolation == "none" and uid is not None:
            _kill_uid(uid)
        started = out.startswith(token.encode())
        stdout = out[len(token) :].decode(errors="replace") if started else ""
        stderr = err.decode(errors="replace")
        wall = time.monotonic() - t0
        if not started and not timed_out:
            return ExecutionResult(code, stdout, stderr, False, False, False, wall, error=f"sandbox setup failed ({self.isolation}): {stderr[-500:]}")
        if code is not None and code > 128 and self.isolation in ("bwrap", "unshare"):
            code = -(code - 128)  # both report a signalled child as 128+signal
        timed_out = timed_out or code == -signal.SIGXCPU
        memory = any(m in stderr for m in _MEMORY_MARKS)
        return ExecutionResult(code, stdout, stderr, timed_out, memory, truncated, wall)


def _write_files(work: str, files: dict[str, str], uid: int | None) -> None:
    for name, text in files.items():
        path = os.path.join(work, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    if uid is not None:
        for dirpath, dirnames, filenames in os.walk(work):
            for n in (dirpath, *(os.path.join(dirpath, d) for d in dirnames), *(os.path.join(dirpath, f) for f in filenames)):
                os.chown(n, uid, uid)
    os.chmod(work, 0o700)


def _scrubbed_env(work: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": work,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONUNBUFFERED": "1",
    }


def _rlimits(limits: SandboxLimits, nproc: bool) -> list[str]:
    mb = 1 << 20
    args = [
        "prlimit",
        f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}",
        f"--as={limits.memory_mb * mb}",
        f"--fsize={limits.file_size_mb * mb}",
        f"--nofile={limits.open_files}",
        "--core=0",
    ]
    # RLIMIT_NPROC counts every process of the real uid (a user namespace also
    # checks the parent level), so it is set only for a per-run uid (root
    # caller); a non-root caller relies on the pid namespace and the wall clock.
    return [*args, f"--nproc={limits.processes}"] if nproc else args


def _marker(token: str) -> list[str]:
    """/bin/sh that prints ``token`` (its $0, absent from the program's argv
    and environment) as the first line of stdout, then execs argv."""
    return ["/bin/sh", "-c", 'printf "%s" "$0"; exec "$@"', token]


def _command(level: str, root: bool, work: str, uid: int | None, limits: SandboxLimits, python: str, token: str, argv: list[str]) -> list[str]:
    if level == "bwrap":
        return [*_rlimits(limits, uid is not None), *_bwrap_args(work, python), *_marker(token), *argv]
    if level == "unshare":
        ns = ["unshare", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--mount-proc", "--propagation", "private"]
        if not root:
            ns.insert(1, "--map-root-user")
        drop = ["setpriv", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        if uid is not None:
            drop[1:1] = [f"--reuid={uid}", f"--regid={uid}"]
        covers = " ".join(f"[ -d {d} ] && mount -t tmpfs -o nosuid,nodev,size=64m,mode=1777 tmpfs {d};" for d in _WRITABLE_DIRS)
        setup = (
            f'set -e; w="$1"; shift; mount --bind "$w" {_STAGE}; {covers} true; '
            f'mkdir -p "$w"; mount --move {_STAGE} "$w"; cd "$w"; set +e; "$@"; exit $?'
        )  # not exec: unshare cannot re-raise SIGXCPU, so sh turns a signal into 128+N
        return [*_rlimits(limits, uid is not None), *ns, "/bin/sh", "-c", setup, "rlvr-setup", work, *drop, "--", *_marker(token), *argv]
    # "none": rlimits and the run's uid (set by Popen) only.
    return [*_rlimits(limits, uid is not None), *_marker(token), *argv]


def _bwrap_args(work: str, python: str) -> list[str]:
    args = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"]
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
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", work, "/work", "--chdir", "/work", "--"]
    return args


@lru_cache(maxsize=8)
def _python_prefix(python: str) -> str:
    real = os.path.realpath(python)
    return os.path.dirname(os.path.dirname(real)) + "/"


@lru_cache(maxsize=16)
def _probe(level: str, root: bool, python: str) -> str:
    """Empty string when ``level`` works here, else the reason it does not."""
    if level == "bwrap" and shutil.which("bwrap") is None:
        return "bwrap not installed (apt-get install bubblewrap)"
    for tool in ("prlimit", "setpriv", "unshare") if level == "unshare" else ("prlimit",):
        if shutil.which(tool) is None:
            return f"{tool} not found (util-linux)"
    box = LocalSandbox.__new__(LocalSandbox)
    box.python, box._root, box._uid_base, box.isolation = python, root, 1_000_000, level
    box._base = tempfile.mkdtemp(prefix="rlvr-sbx-probe-")
    os.chmod(box._base, 0o711)
    try:
        res = box.run({}, ["python", "-I", "-S", "-c", "print('up')"], "", SandboxLimits(wall_s=20.0))
    finally:
        box.close()
    if res.error or res.stdout.strip() != "up":
        return (res.error or f"exit {res.exit_code}: {res.stderr.strip()[-300:]}") or "no output"
    return ""


def _pump(proc: subprocess.Popen, data: bytes, limits: SandboxLimits, deadline: float) -> tuple[bytes, bytes, bool, bool]:
    """Feed stdin, collect capped stdout/stderr until exit or deadline."""
    assert proc.stdin and proc.stdout and proc.stderr
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    pidfd = os.pidfd_open(proc.pid)
    sel.register(pidfd, selectors.EVENT_READ)
    stdin_fd, off = proc.stdin.fileno(), 0
    if data:
        os.set_blocking(stdin_fd, False)
        sel.register(stdin_fd, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    timed_out = truncated = killed = False
    while len(sel.get_map()) > 1 or (pidfd in sel.get_map() and not killed):
        left = deadline - time.monotonic()
        if left <= 0:
            if killed:
                break  # something outside our group holds the pipes: stop waiting
            timed_out = not truncated
            _killpg(proc)
            killed, deadline = True, time.monotonic() + _GRACE_S
            continue
        for key, _ in sel.select(left):
            fd = key.fd
            if fd == pidfd:  # the program exited: end its group, then drain
                sel.unregister(pidfd)
                _killpg(proc)
                killed, deadline = True, min(deadline, time.monotonic() + _GRACE_S)
            elif fd == stdin_fd:
                try:
                    off += os.write(fd, data[off : off + 65536])
                except (BrokenPipeError, BlockingIOError):
                    off = len(data)
                if off >= len(data):
                    sel.unregister(fd)
                    proc.stdin.close()
            else:
                chunk = os.read(fd, 65536)
                if not chunk:
                    sel.unregister(fd)
                    continue
                buf = bufs[fd]
                room = limits.output_bytes - len(buf)
                buf += chunk[: max(room, 0)]
                if len(chunk) > room and not truncated:
                    truncated = True
                    _killpg(proc)
                    killed, deadline = True, min(deadline, time.monotonic() + _GRACE_S)
    sel.close()
    os.close(pidfd)
    if not proc.stdin.closed:
        proc.stdin.close()
    if not killed:
        _killpg(proc)
    return bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()]), timed_out, truncated


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _kill_uid(uid: int) -> None:
    """Level ``none`` has no pid namespace: kill whatever the run's uid left."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            os.kill(int(pid), signal.SIGKILL)
                        break
        except (OSError, ValueError):
            continue
