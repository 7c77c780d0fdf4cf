"""A real nats-server running the shipped auth config, with secrets made on the spot.

``AuthServer`` runs ``ops/gen-secrets.sh`` (a CA, a server certificate,
one password per role user) for a run id into a temporary folder, starts
``nats-server`` with the rendered ``ops/nats/auth-tls.conf`` and
``accounts.conf``, and stops it by PID. ``nats_section`` is the ``[nats]``
block every role's config carries to connect as its own user over TLS.
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

import pytest

REPO = Path(__file__).resolve().parents[2]
NATS_SERVER = Path(sys.executable).parent / "nats-server"
ROLES = ("learn", "rollout", "verify", "ops", "autoscale")


class AuthServer:
    def __init__(self, root: Path, run: str) -> None:
        if shutil.which("openssl") is None:
            pytest.skip("openssl is not installed: ops/gen-secrets.sh cannot make the certificates")
        self.root = root
        self.run = run
        self.secrets = root / "secrets"
        subprocess.run(
            ["sh", str(REPO / "ops" / "gen-secrets.sh"), "-r", run, "-o", str(self.secrets), "-c", str(self.secrets)],
            check=True, capture_output=True, timeout=60,
        )
        self.passwords = {role: (self.secrets / f"{role}.password").read_text().strip() for role in ROLES}
        self.env = dict(line.split("=", 1) for line in (self.secrets / "nats.env").read_text().split())
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log = root / "nats-server.log"

    @property
    def url(self) -> str:
        return f"tls://127.0.0.1:{self.port}"

    def nats_section(self, **extra: object) -> dict:
        return {
            "url": self.url,
            "user": "{role}",
            "password_file": str(self.secrets / "{role}.password"),
            "tls_ca_file": str(self.secrets / "ca.pem"),
            "connect_timeout_s": 10.0,
            **extra,
        }

    def __enter__(self) -> AuthServer:
        text = (self.secrets / "nats.conf").read_text()
        assert "store_dir: /data/nats" in text
        conf = self.secrets / "test-server.conf"  # beside accounts.conf, which it includes
        conf.write_text(text.replace("store_dir: /data/nats", f"store_dir: {self.root / 'js'}"))
        self.proc, self.port = start_server(conf, self.log, env=self.env)
        return self

    def __exit__(self, *exc: object) -> None:
        stop_server(self.proc)


def start_server(conf: Path, log_path: Path, env: dict | None = None, args: tuple[str, ...] = ()):
    """nats-server -c ``conf`` on a free loopback port: (process, port), once it says it is ready."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(NATS_SERVER), "-c", str(conf), "-a", "127.0.0.1", "-p", "-1", "-m", "-1", *args],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, start_new_session=True,
        )
    deadline = time.monotonic() + 20
    while "Server is ready" not in (text := log_path.read_text(errors="replace")):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc)
            raise AssertionError(f"nats-server did not start:\n{text}")
        time.sleep(0.02)  # another process: its log saying so is the only sign it is ready
    return proc, int(re.search(r"client connections on [^:\s]+:(\d+)", text).group(1))


def stop_server(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


async def connect_as(server: AuthServer, role: str, **kw):
    """A nats-py connection as ``role``'s user, made the way the actors make theirs."""
    import nats

    from rlvr.actors.config import NatsConfig
    from rlvr.actors.secrets import connect_options

    cfg = NatsConfig(**server.nats_section()).for_role(role)
    return await nats.connect(cfg.url, max_reconnect_attempts=0, connect_timeout=5, **connect_options(cfg), **kw)
