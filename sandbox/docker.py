"""The ``docker`` sandbox: untrusted programs in a reused, locked-down
container, driven through the docker SDK.

The container (one per sandbox, re-created when the memory or pids limits
change or it died) runs a sleeping Python as pid 1 with:
``network_mode="none"``, a cgroup memory limit (no swap), a pids limit, a CPU
quota, a read-only root with size-capped tmpfs ``/work``, ``/tmp`` and
``/dev/shm``, every capability dropped and ``no-new-privileges``. pid 1 runs as
uid 65533 and every program as 65534, so a program can neither ptrace nor
signal the process that outlives it. The image is configurable;
``scripts/ci_docker.sh`` builds ``rlvr-sandbox:local`` offline.

One run is one ``exec`` of a short trusted prelude, ``_BOOT``: it reads a
length-prefixed JSON header from stdin (files, argv, limits), makes a fresh
``/work/<random>`` dir, writes the files, sets rlimits (CPU, address space,
file size, open files), writes a setup marker on stdout and ``execv``s the
program, which inherits the rest of stdin. No trusted process is left for the
program to kill. This process keeps the wall clock and the output caps on the
exec's socket; at the deadline or cap, and after every run, a cleanup exec
kills every process of the sandbox user (``kill(-1)`` spares pid 1) and
removes the run's dir, so the container is clean for reuse.

Not covered: pulling or building images (see the script), and seccomp
profiles beyond Docker's default.
"""

from __future__ import annotations

import json
import secrets
import selectors
import socket
import struct
import time
from typing import Any

from rlvr.sandbox.base import (
    ExecutionResult,
    SandboxLimits,
    SandboxUnavailableError,
    check_file_names,
)

_MARK = b"\x00rlvr-sandbox-ready\n"
_USER = "65534:65534"
# pid 1 runs as another uid: a program (65534) can then neither ptrace it (and
# so plant code that outlives the run in a reused container) nor signal it.
_KEEPER = "65533:65533"
_BOOT = r"""
import json, os, resource, sys
def read(n):
    raw = b""
    while len(raw) < n:
        got = os.read(0, n - len(raw))
        if not got:
            sys.exit("rlvr-sandbox: short header")
        raw += got
    return raw
h = json.loads(read(int(read(12))))
os.makedirs(h["dir"], mode=0o700)
os.chdir(h["dir"])
for name, text in h["files"].items():
    os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
    with open(name, "w", encoding="utf-8") as f:
        f.write(text)
for res, v in h["rlimits"]:
    resource.setrlimit(getattr(resource, res), (v, v + (res == "RLIMIT_CPU")))
os.environ.clear()
os.environ.update(h["env"])
os.write(1, b"\x00rlvr-sandbox-ready\n")
os.execv(h["argv"][0], h["argv"])
"""
# Kill what the run left (kill(-1) spares pid 1 and the caller), remove its
# dir, and print the cgroup's OOM-kill count (v2, else v1; -1 if unreadable).
_CLEAN = r"""
import os, shutil, sys
try:
    os.kill(-1, 9)
except OSError:
    pass
shutil.rmtree(sys.argv[1], ignore_errors=True)
n = -1
for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
    try:
        with open(path) as f:
            n = int(dict(l.split() for l in f if l.strip()).get("oom_kill", -1))
        break
    except (OSError, ValueError):
        continue
print(n)
"""
# pid 1: sleeps, and auto-reaps the orphans that cleanup kills.
_KEEPALIVE = "import signal, time\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)\nwhile True: time.sleep(3600)"


class DockerSandbox:
    def __init__(
        self,
        image: str = "rlvr-sandbox:local",
        python: str = "/usr/bin/python3",
        client: Any = None,
        cpus: float = 1.0,
        work_mb: int = 64,
        tmp_mb: int = 16,
    ) -> None:
        try:
            import docker
        except ImportError as e:
            raise SandboxUnavailableError("the docker SDK is not installed (pip install docker)") from e
        try:
            self._client = client or docker.from_env(timeout=30)
            self._client.ping()
        except Exception as e:  # the SDK raises several types for "no engine"
            raise SandboxUnavailableError(f"no Docker engine answers: {e}") from e
        try:
            self._client.images.get(image)
        except Exception as e:
            raise SandboxUnavailableError(f"image {image!r} not found (build it with scripts/ci_docker.sh): {e}") from e
        self.image, self.python, self.cpus, self.work_mb, self.tmp_mb = image, python, cpus, work_mb, tmp_mb
        self.why = (f"docker: container from {image} as uid 65534, no network, read-only root, "
                    f"/work {work_mb} MiB, /tmp {tmp_mb} MiB")
        self._container: Any = None
        self._key: tuple[int, int] | None = None
        self._ooms = -1  # the container's OOM-kill count after the last run

    def run(
        self, files: dict[str, str], argv: list[str], stdin: str, limits: SandboxLimits
    ) -> ExecutionResult:
        check_file_names(files)
        t0 = time.monotonic()
        try:
            container = self._ensure(limits)
        except Exception as e:
            return ExecutionResult(None, "", "", False, False, False, time.monotonic() - t0, error=f"container start failed: {e}")
        work = f"/work/{secrets.token_hex(8)}"
        argv = [self.python, *argv[1:]] if argv and argv[0] in ("python", "python3") else argv
        mb = 1 << 20
        header = json.dumps({
            "dir": work,
            "files": files,
            "argv": argv,
            "env": {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": work, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
                    "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8", "PYTHONUNBUFFERED": "1"},
            "rlimits": [["RLIMIT_CPU", limits.cpu_s], ["RLIMIT_AS", limits.memory_mb * mb],
                        ["RLIMIT_FSIZE", limits.file_size_mb * mb], ["RLIMIT_NOFILE", limits.open_files],
                        ["RLIMIT_CORE", 0]],
        }).encode()
        payload = b"%012d" % len(header) + header + stdin.encode()
        api = self._client.api
        try:
            exec_id = api.exec_create(container.id, [self.python, "-I", "-S", "-c", _BOOT], stdin=True, user=_USER, workdir="/work")["Id"]
            sock = api.exec_start(exec_id, socket=True)
        except Exception as e:
            return ExecutionResult(None, "", "", False, False, False, time.monotonic() - t0, error=f"docker exec failed: {e}")
        raw = getattr(sock, "_sock", sock)
        try:
            out, err, timed_out, truncated = _pump(raw, payload, limits, t0 + limits.wall_s)
        finally:
            # shutdown, not just close: the SDK holds makefile() references
            # that keep the fd (and the daemon's blocked stream copy) alive.
            try:
                raw.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            raw.close()
            sock.close()
        killed = timed_out or truncated
        code = None if killed else _exit_code(api, exec_id)  # before clean-up, which may remove the container
        oom = self._clean(container, work)
        wall = time.monotonic() - t0
        if not out.startswith(_MARK):
            return ExecutionResult(code, "", err.decode(errors="replace"), False, False, False, wall, error=f"sandbox setup failed (docker): {err.decode(errors='replace')[-500:]}")
        stdout = out[len(_MARK):].decode(errors="replace")
        stderr = err.decode(errors="replace")
        timed_out = timed_out or code in (128 + 24, -24)  # SIGXCPU
        memory = oom or "MemoryError" in stderr
        return ExecutionResult(code, stdout, stderr, timed_out, memory, truncated, wall)

    def close(self) -> None:
        if self._container is not None:
            try:
                self._container.remove(force=True)
            except Exception:
                pass  # already gone
            self._container = None

    def _ensure(self, limits: SandboxLimits) -> Any:
        key = (limits.memory_mb, limits.processes)
        if self._container is not None and self._key == key:
            self._container.reload()
            if self._container.status == "running":
                return self._container
        self.close()
        mem = f"{limits.memory_mb + 64}m"  # room for the prelude beside the program's RLIMIT_AS
        self._container = self._client.containers.run(
            self.image,
            [self.python, "-I", "-S", "-c", _KEEPALIVE],
            detach=True,
            network_mode="none",
            mem_limit=mem,
            memswap_limit=mem,
            # pid 1 + the program's ``processes`` + the clean-up exec.
            pids_limit=limits.processes + 2,
            nano_cpus=int(self.cpus * 1e9),
            read_only=True,
            tmpfs={"/work": f"rw,exec,size={self.work_mb}m,mode=1777", "/tmp": f"rw,size={self.tmp_mb}m,mode=1777"},
            user=_KEEPER,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            shm_size=f"{self.tmp_mb}m",
            labels={"rlvr.sandbox": "1"},
        )
        self._key, self._ooms = key, 0
        return self._container

    def _clean(self, container: Any, work: str) -> bool:
        """Clean up after a run; True when the cgroup OOM-killed during it."""
        try:
            res = container.exec_run([self.python, "-I", "-S", "-c", _CLEAN, work], user=_USER)
            ooms = int(res.output.split()[-1])
        except Exception:
            self.close()  # a container we cannot clean is not reused
            return False
        hit = self._ooms >= 0 and ooms > self._ooms
        self._ooms = ooms
        return hit


def _exit_code(api: Any, exec_id: str) -> int | None:
    try:
        return api.exec_inspect(exec_id).get("ExitCode")
    except Exception:  # the container went away (e.g. removed after a failed clean-up)
        return None


def _pump(sock: socket.socket, data: bytes, limits: SandboxLimits, deadline: float) -> tuple[bytes, bytes, bool, bool]:
    """Send stdin and demultiplex the exec stream (8-byte frame headers)
    until EOF, the deadline, or an output cap."""
    sock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
    pending, off = bytearray(), 0
    bufs = {1: bytearray(), 2: bytearray()}
    cap = limits.output_bytes + len(_MARK)
    timed_out = truncated = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        events = sel.select(left)
        mask = events[0][1] if events else 0
        if mask & selectors.EVENT_WRITE:
            try:
                off += sock.send(data[off : off + 65536])
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                off = len(data)
            if off >= len(data):
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                sel.modify(sock, selectors.EVENT_READ)
        if mask & selectors.EVENT_READ:
            try:
                chunk = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            if not chunk:
                break
            pending += chunk
            while len(pending) >= 8:
                kind, size = struct.unpack(">BxxxL", pending[:8])
                if len(pending) < 8 + size:
                    break
                if kind in bufs:
                    bufs[kind] += pending[8 : 8 + size]
                del pending[: 8 + size]
            if len(bufs[1]) > cap or len(bufs[2]) > limits.output_bytes:
                truncated = True
                break
    sel.close()
    return bytes(bufs[1][:cap]), bytes(bufs[2][: limits.output_bytes]), timed_out, truncated


__all__ = ["DockerSandbox"]
