"""Role processes started by this process: `up` starts every role, `autoscale` verifier replicas.

Each child is ``rlvr-actor --role ROLE --config FILE --replica NAME`` in its
own session (so a Ctrl-C reaches the parent alone, which stops the children
in order, by PID), its output appended to ``<log_dir>/<replica>.log``, and
with ``RLVR_UP_PID`` set so it follows its parent if the parent dies
(``rlvr.actors.lifeline``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rlvr.actors.lifeline import UP_PID_ENV
from rlvr.cli.cpus import CpuSplit

# torch.distributed variables from the calling environment (a test process
# that built an engine, a torchrun job) would make every child try the same
# rendezvous port; each child is a single-rank process of its own.
_DIST_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


class Child:
    def __init__(self, role: str, replica: str, proc: subprocess.Popen, log_path: Path) -> None:
        self.role = role
        self.replica = replica
        self.proc = proc
        self.log_path = log_path
        self.started_at = time.monotonic()

    def signal(self, signum: int) -> None:
        """Send a signal to the child, if it still runs (a child that just exited is not an error)."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signum)
            except ProcessLookupError:
                pass

    def failure(self) -> str:
        """What the child said when it failed, from the end of its log: the ``error`` of its
        last ``actor_failed`` line, else the last line of a Python traceback; "" when neither."""
        return last_error(self.log_path)

    def kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DIST_VARS}
    env[UP_PID_ENV] = str(os.getpid())  # the child follows its parent (actors/lifeline.py)
    env.update(extra)
    return env


def spawn_role(role: str, replica: str, config_file: Path, log_dir: Path, *, threads: int = 0,
               extra_env: dict[str, str] | None = None, cpus: CpuSplit | None = None) -> Child:
    """Start one role child; ``cpus``: the run's CPU split, the child pins itself to its side."""
    env = child_env(PYTHONUNBUFFERED="1", **(extra_env or {}), **(cpus.env(role) if cpus else {}))
    if threads:
        n = str(threads)
        env.update(OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n)
    log_path = log_dir / f"{replica}.log"
    log = open(log_path, "ab")  # noqa: SIM115 (handed to the child)
    proc = subprocess.Popen(
        # -P: the working directory never lands on the role's sys.path (a .py file there would shadow imports).
        [sys.executable, "-P", "-m", "rlvr.cli", "--role", role, "--config", str(config_file), "--replica", replica],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    log.close()
    return Child(role, replica, proc, log_path)


def last_error(log_path: Path, tail_bytes: int = 65_536) -> str:
    """The reason a role gave for failing, read from the end of its log (see ``Child.failure``)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - tail_bytes))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if '"actor_failed"' in line or '"cannot_connect"' in line:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("error"):
                return str(record["error"])
    traceback_at = max((i for i, line in enumerate(lines) if line.startswith("Traceback")), default=None)
    if traceback_at is not None:
        tail = [line for line in lines[traceback_at:] if line.strip() and not line.startswith((" ", "\t"))]
        if len(tail) > 1:
            return tail[-1]
    return ""

