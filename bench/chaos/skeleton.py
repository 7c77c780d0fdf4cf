"""The skeleton under test: nats-server processes and role processes, by PID.

``Server`` is one ``nats-server -js`` that can be SIGKILLed and restarted on
the same port and store directory (and, for the cluster, inside a network
namespace). ``Skeleton`` starts ``rlvr-actor --role ...`` processes the way a
user would (``python -m rlvr.cli``, ``OMP_NUM_THREADS=1``,
``RLVR_RUN_DIR``), writes their configs, and signals, reaps and restarts
them. Every process it starts it stops by PID (its own process group), never
by name. Not here: deciding what to break (faults.py) or judging the result
(invariants.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec

from rlvr.cli.natsserver import nats_server_binary

REPO = Path(__file__).resolve().parents[2]
_LISTEN = re.compile(r"Listening for client connections on [^:\s]+:(\d+)")


class SkeletonStartError(RuntimeError):
    pass


def _netns_prefix(netns: str | None) -> list[str]:
    return ["ip", "netns", "exec", netns] if netns else []


class Server:
    """One nats-server; ``port`` is fixed after the first start so a restart keeps it."""

    def __init__(self, store: Path, *, addr: str = "127.0.0.1", port: int = -1, conf: Path | None = None,
                 netns: str | None = None, name: str = "n", monitor: bool = False) -> None:
        self.store, self.addr, self.port, self.conf, self.netns, self.name = store, addr, port, conf, netns, name
        self.monitor_port = _free_port() if monitor else None  # /healthz, what a liveness probe reads
        self.log = store.parent / f"{name}-server.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"nats://{self.addr}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> Server:
        self.store.mkdir(parents=True, exist_ok=True)
        offset = self.log.stat().st_size if self.log.exists() else 0
        argv = [nats_server_binary()] + (["-c", str(self.conf)] if self.conf else [])
        conf_text = self.conf.read_text() if self.conf else ""
        argv += ["-js", "-a", self.addr, "-p", str(self.port)]
        argv += ["-m", str(self.monitor_port)] if self.monitor_port else []
        # nats-server refuses a flag that repeats a key its config file sets.
        argv += [] if "store_dir:" in conf_text else ["-sd", str(self.store)]
        argv += [] if "server_name:" in conf_text else ["-n", self.name]
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(_netns_prefix(self.netns) + argv, stdout=f, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.starts += 1
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(self.log, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
            if (m := _LISTEN.search(text)) is not None:
                self.port = int(m.group(1))
            if "Server is ready" in text and self.port > 0:
                return self
            if self.proc.poll() is not None:
                raise SkeletonStartError(f"nats-server {self.name} exited {self.proc.returncode}: {text[-1500:]}")
            time.sleep(0.05)
        self.kill()
        raise SkeletonStartError(f"nats-server {self.name} not ready after {timeout_s}s; see {self.log}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def healthz(self) -> tuple[int, str]:
        """GET /healthz (status, body): 503 names a stream with a latched write error (nats-server >= 2.14)."""
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://{self.addr}:{self.monitor_port}/healthz", timeout=5) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        except OSError as e:
            return 0, f"{type(e).__name__}: {e}"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Role:
    """One role process and how to start it again."""

    def __init__(self, role: str, replica: str, config: Path) -> None:
        self.role, self.replica, self.config = role, replica, config
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.expect_exit = False  # set by whoever stops it on purpose

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Skeleton:
    """Role processes of one run against ``urls`` (comma-separated NATS URLs)."""

    def __init__(self, root: Path, run: str, urls: str, *, netns: str | None = None) -> None:
        self.root, self.run, self.urls, self.netns = root, run, urls, netns
        root.mkdir(parents=True, exist_ok=True)
        self.roles: dict[str, Role] = {}

    def write_config(self, name: str, cfg: dict) -> Path:
        path = self.root / f"{name}.json"
        path.write_bytes(msgspec.json.encode(cfg))
        return path

    def log_path(self, replica: str) -> Path:
        return self.root / f"{replica}.log"

    def log_text(self, replica: str) -> str:
        p = self.log_path(replica)
        return p.read_text(errors="replace") if p.exists() else ""

    def start(self, role: str, replica: str, config: Path) -> Role:
        r = self.roles.get(replica) or Role(role, replica, config)
        r.role, r.config, r.expect_exit = role, config, False
        self.roles[replica] = r
        env = dict(os.environ, OMP_NUM_THREADS="1", RLVR_RUN_DIR=str(self.root), PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        for var in ("MASTER_PORT", "MASTER_ADDR", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
            env.pop(var, None)
        with open(self.log_path(replica), "ab") as f:
            f.write(f"\n=== chaos: start #{r.starts + 1} of {replica} at {time.time():.3f}\n".encode())
            f.flush()
            r.proc = subprocess.Popen(
                _netns_prefix(self.netns) + [sys.executable, "-m", "rlvr.cli", "--role", role, "--config",
                                             str(config), "--nats", self.urls, "--replica", replica],
                stdout=f, stderr=subprocess.STDOUT, env=env, cwd=self.root, start_new_session=True,
            )
        r.starts += 1
        return r

    def restart(self, replica: str, config: Path | None = None) -> Role:
        r = self.roles[replica]
        self.reap(replica)
        return self.start(r.role, replica, config or r.config)

    def signal(self, replica: str, sig: int) -> None:
        r = self.roles[replica]
        if r.alive():
            os.kill(r.proc.pid, sig)

    def reap(self, replica: str, timeout_s: float = 30.0) -> int | None:
        """SIGKILL the replica's whole process group (its verifier pool too) and wait for it."""
        r = self.roles[replica]
        if r.proc is None:
            return None
        if r.proc.poll() is None:
            try:
                os.killpg(r.proc.pid, signal.SIGCONT)
                os.killpg(r.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            return r.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None
        finally:
            _kill_group(r.proc.pid)  # a pool worker left behind by a SIGKILLed parent

    def wait_exit(self, replica: str, timeout_s: float) -> int | None:
        r = self.roles[replica]
        try:
            return r.proc.wait(timeout_s) if r.proc else None
        except subprocess.TimeoutExpired:
            return None

    def unexpected_exits(self) -> list[tuple[str, int]]:
        return [(n, r.proc.returncode) for n, r in self.roles.items()
                if r.proc is not None and r.proc.poll() is not None and not r.expect_exit]

    def stop_all(self) -> None:
        for name in list(self.roles):
            self.reap(name, timeout_s=10)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
