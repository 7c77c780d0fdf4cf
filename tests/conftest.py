"""Fixtures shared by every test: a real nats-server, real actor processes.

``nats_server`` starts ``nats-server -js`` on a free port with a temporary
store and stops it by PID. ``ActorProcs`` starts ``rlvr-actor --role ...``
as real OS processes against it and always reaps them (SIGKILL by PID on
teardown). Waiting is on conditions (a heartbeat, a stream count), each with
a deadline, never on a fixed sleep.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

from rlvr.cli.natsserver import NatsServer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


# End-to-end tests (real role processes, real training runs, the vLLM engine, the
# docker-and-non-root sandbox matrix): `pytest -m "not slow"` leaves them out and
# runs in a few minutes. Marked here, by module, so the list is in one place;
# a module may also mark itself (`pytestmark = pytest.mark.slow`).
SLOW_MODULES = {
    "tests/test_builtin_example.py",
    "tests/test_examples_run.py",
    "tests/cli/test_up.py",
    "tests/actors/test_verify_bus.py",
    "tests/actors/test_poison.py",
    "tests/learner/test_learner_bus.py",
    "tests/rollout/test_engine_vllm.py",
    "tests/rollout/test_rollout_bus.py",
    "tests/rollout/test_rollout_weights_bus.py",
    "tests/sandbox/test_sandbox_hostile.py",
    "tests/verify/test_code_humaneval.py",
}
# Fixtures that make any test using them end-to-end.
SLOW_FIXTURES = {"vllm_engine", "single_process"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = Path(str(item.fspath)).resolve().relative_to(REPO).as_posix()
        if module in SLOW_MODULES or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu and not _cuda_available():  # GPU checks (tests/gpu, bench/gpu_check.sh) skip cleanly on CPU
        for item in gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    with NatsServer(tmp_path / "nats") as server:
        yield server


def wait_for(predicate: Callable[[], object], timeout_s: float = 30.0, what: str = "condition") -> object:
    """Poll ``predicate`` until it returns something truthy (bounded)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def write_config(path: Path, cfg: dict) -> Path:
    """Write a config dict as the JSON form `load_config` reads."""
    path.write_bytes(msgspec.json.encode(cfg))
    return path


class ActorProcs:
    def __init__(self, tmp_path: Path, nats_url: str) -> None:
        self.tmp_path = tmp_path
        self.nats_url = nats_url
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    def start(self, role: str, config: Path, replica: str, extra_env: dict | None = None) -> subprocess.Popen:
        log = self.tmp_path / f"{replica}.log"
        env = dict(os.environ, OMP_NUM_THREADS="1", RLVR_RUN_DIR=str(self.tmp_path), PYTHONUNBUFFERED="1")
        # Test-only verifiers (tests.verifier_fixtures) must import in the actor.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        # A test that built a LearnerEngine in-process set these; a child must pick its own.
        for var in ("MASTER_PORT", "MASTER_ADDR", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
            env.pop(var, None)
        env.update(extra_env or {})
        with open(log, "ab") as f:
            proc = subprocess.Popen(
                [sys.executable, "-m", "rlvr.cli", "--role", role, "--config", str(config),
                 "--nats", self.nats_url, "--replica", replica],
                stdout=f, stderr=subprocess.STDOUT, env=env, cwd=self.tmp_path, start_new_session=True,
            )
        self.procs[replica] = proc
        self.logs[replica] = log
        return proc

    def init(self, config: Path) -> None:
        """``rlvr-actor init``: create the run's topology, as the learner would, so a
        rollout or verifier started alone finds its streams and consumers."""
        out = subprocess.run(
            [sys.executable, "-m", "rlvr.cli", "init", "--config", str(config), "--nats", self.nats_url],
            capture_output=True, text=True, timeout=60, cwd=self.tmp_path,
        )
        assert out.returncode == 0, out.stderr

    def log_text(self, replica: str) -> str:
        return self.logs[replica].read_text(errors="replace")

    def kill(self, replica: str, sig: int = signal.SIGKILL) -> None:
        os.kill(self.procs[replica].pid, sig)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def actors(tmp_path: Path, nats_server: NatsServer) -> Iterator[ActorProcs]:
    procs = ActorProcs(tmp_path, nats_server.url)
    try:
        yield procs
    finally:
        procs.stop_all()
