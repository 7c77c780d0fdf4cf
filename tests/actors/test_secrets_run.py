"""A real run over TLS, each role as its own NATS user, leaves its secrets nowhere.

The skeleton run (trivial engine, dry learner) runs against nats-server with
the shipped auth config and secrets made by ``ops/gen-secrets.sh``: the
learner and the rollout read their passwords from files, the verifier from an
environment variable, and ``rlvr-actor status`` connects as the ``ops`` user.
Then every file the run wrote (logs, traces, configs, checkpoints), the
status output and every value in the run's KV bucket are searched for every
password.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import anyio
import msgspec
import pytest

from tests.actors.natsauth import AuthServer, connect_as
from tests.conftest import REPO, ActorProcs, wait_for, write_config

RUN = "sec"


def _kv_values(server: AuthServer) -> dict[str, bytes]:
    async def go():
        nc = await connect_as(server, "learn")
        try:
            kv = await nc.jetstream(timeout=5).key_value(f"rlvr-{RUN}-state")
            return {key: (await kv.get(key)).value for key in await kv.keys()}
        finally:
            await nc.close()

    return anyio.run(go)


@pytest.mark.slow
def test_a_run_as_role_users_over_tls_leaves_no_secret_in_logs_traces_status_or_kv(tmp_path):
    with AuthServer(tmp_path / "nats", RUN) as server:
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        raw = msgspec.toml.decode((REPO / "tests" / "data" / "skeleton.toml").read_bytes())
        raw.update(run=RUN, nats=server.nats_section())
        raw["learn"]["steps"] = 4
        raw["up"]["verify_replicas"] = 1
        raw["observability"]["log_format"] = "json"
        cfg = write_config(run_dir / "run.json", raw)
        by_env = {**server.nats_section(password_env="RLVR_TEST_NATS_PASSWORD"), "password_file": ""}
        verify_cfg = write_config(run_dir / "verify.json", {**raw, "nats": by_env})

        procs = ActorProcs(run_dir, server.url)
        try:
            learner = procs.start("learn", cfg, "learn-0")
            procs.start("rollout", cfg, "rollout-0")
            procs.start("verify", verify_cfg, "verify-0",
                        extra_env={"RLVR_TEST_NATS_PASSWORD": server.passwords["verify"]})

            def status() -> str | None:
                out = subprocess.run(
                    [sys.executable, "-m", "rlvr.cli", "status", "--config", str(cfg), "--wait", "1.5", "--json"],
                    capture_output=True, text=True, timeout=60, cwd=run_dir,
                )
                seen = {r["role"] for r in json.loads(out.stdout)["replicas"]} if out.returncode == 0 else set()
                return out.stdout + out.stderr if seen == {"learn", "rollout", "verify"} else None

            status_text = wait_for(status, timeout_s=120, what="status (as the ops user) seeing all three roles")
            assert learner.wait(timeout=240) == 0, procs.log_text("learn-0")[-3000:]
            for replica in ("rollout-0", "verify-0"):
                procs.kill(replica, signal.SIGTERM)
                assert procs.procs[replica].wait(timeout=30) == 0
            kv = _kv_values(server)
        finally:
            procs.stop_all()

    assert b'"password_file"' in kv["config"]  # the stored config names where the secret is...
    secrets = [pw.encode() for pw in server.passwords.values()]
    files = [p for p in run_dir.rglob("*") if p.is_file()] + [server.log]
    assert any(p.suffix == ".log" for p in files) and any("trace" in str(p) for p in files)
    leaks = [str(p) for p in files for s in secrets if s in p.read_bytes()]
    leaks += [f"kv:{key}" for key, value in kv.items() for s in secrets if s in value]
    leaks += ["status output" for s in secrets if s.decode() in status_text]
    assert leaks == []  # ...never the secret
