"""Topology has one owner: `rlvr-actor init` (or the learner) creates it, every other role only checks it.

Real nats-server, real `rlvr-actor` processes. A verifier never creates,
updates or repositions a stream or consumer: it waits (bounded, saying what
for) and binds, and a stream of the wrong shape stops it with a clear error.
"""

from __future__ import annotations

import anyio
import nats
from nats.js import api as js_api

from rlvr.actors.config import BusConfig
from rlvr.protocol import RunNames
from tests.busclient import BusClient
from tests.conftest import wait_for, write_config

RUN = "topo"
NAMES = RunNames(RUN)


def _config(tmp_path, name: str = "run.json", nats_cfg: dict | None = None, **bus):
    return write_config(
        tmp_path / name,
        {
            "run": RUN,
            "nats": nats_cfg or {},
            "bus": {"heartbeat_every_s": 0.5, **bus},
            "verify": {"pool_size": 1, "warm_verifiers": [], "concurrency": 1},
        },
    )


def _js(url: str, fn):
    async def go():
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=1)
        try:
            return await fn(nc.jetstream(timeout=5))
        finally:
            await nc.close()

    return anyio.run(go)


def _stream_config(url: str, kind: str) -> js_api.StreamConfig:
    async def get(js):
        return (await js.stream_info(NAMES.stream(kind))).config

    return _js(url, get)


def _stream_names(url: str) -> list[str]:
    async def names(js):
        return await js.streams_info()

    return sorted(i.config.name for i in _js(url, names))


def test_init_creates_every_stream_with_bounded_retention_and_the_shared_consumers(actors, nats_server, tmp_path):
    actors.init(_config(tmp_path))
    defaults = BusConfig()
    scored = _stream_config(nats_server.url, "SCORED")
    assert scored.max_age == defaults.scored_max_age_s and scored.max_bytes == defaults.scored_max_bytes
    dead = _stream_config(nats_server.url, "DEAD")
    assert dead.max_age == defaults.dead_max_age_s and dead.max_bytes == defaults.dead_max_bytes
    bus = BusClient(nats_server.url, RUN)
    assert bus.consumer("TASKS", "rollout").config.filter_subject == NAMES.tasks
    assert bus.consumer("ROLLOUTS", "verify").config.filter_subject == NAMES.rollouts
    assert {f"RLVR_{RUN}_{k}" for k in ("TASKS", "ROLLOUTS", "SCORED", "WEIGHTS", "DEAD")} <= set(
        _stream_names(nats_server.url)
    )


def test_a_verifier_with_another_scored_max_age_leaves_scored_alone(actors, nats_server, tmp_path):
    # Regression (issue 12 item 4): every role's ensure_topology updated the
    # streams to its own config, so a verifier with a short scored_max_age_s
    # silently cut the learner's replay log.
    actors.init(_config(tmp_path))
    before = _stream_config(nats_server.url, "SCORED")
    mine = _config(tmp_path, "verify.json", scored_max_age_s=700.0, scored_max_bytes=1 << 20, dead_max_age_s=60.0)
    actors.start("verify", mine, "verify-0")
    BusClient(nats_server.url, RUN).wait_heartbeat(lambda hb: hb.replica == "verify-0" and hb.state == "running")
    after = _stream_config(nats_server.url, "SCORED")
    assert (after.max_age, after.max_bytes) == (before.max_age, before.max_bytes) == (7 * 86400.0, 2 << 30)
    assert _stream_config(nats_server.url, "DEAD").max_age == BusConfig().dead_max_age_s
    assert "topology_settings_differ" in actors.log_text("verify-0")


def test_a_verifier_waits_for_the_owner_saying_what_for_then_binds(actors, nats_server, tmp_path):
    cfg = _config(tmp_path)
    proc = actors.start("verify", cfg, "verify-0")
    wait_for(lambda: "waiting_for_topology" in actors.log_text("verify-0"), what="the verifier saying it waits")
    assert f"RLVR_{RUN}_ROLLOUTS" in actors.log_text("verify-0")
    assert _stream_names(nats_server.url) == []  # it created nothing while waiting
    actors.init(cfg)
    BusClient(nats_server.url, RUN).wait_heartbeat(lambda hb: hb.replica == "verify-0" and hb.state == "running")
    assert proc.poll() is None


def test_a_verifier_with_no_owner_fails_past_its_deadline_naming_what_is_missing(actors, nats_server, tmp_path):
    proc = actors.start("verify", _config(tmp_path, topology_wait_s=1.0), "verify-0")
    assert proc.wait(timeout=60) == 1
    log = actors.log_text("verify-0")
    assert "TopologyMissingError" in log and f"RLVR_{RUN}_ROLLOUTS" in log and "rlvr-actor init" in log
    assert _stream_names(nats_server.url) == []


def test_a_stream_of_the_wrong_shape_stops_the_verifier_and_is_not_rewritten(actors, nats_server, tmp_path):
    cfg = _config(tmp_path)
    actors.init(cfg)

    async def reshape(js):
        # Someone (another version, another tool) made ROLLOUTS a limits stream.
        await js.delete_stream(NAMES.stream("ROLLOUTS"))
        await js.add_stream(name=NAMES.stream("ROLLOUTS"), subjects=[NAMES.rollouts])

    _js(nats_server.url, reshape)
    proc = actors.start("verify", cfg, "verify-0")
    assert proc.wait(timeout=60) == 1
    assert "TopologyMismatchError" in actors.log_text("verify-0")
    assert _stream_config(nats_server.url, "ROLLOUTS").retention == js_api.RetentionPolicy.LIMITS


def test_init_reports_an_unreachable_server_without_a_traceback(tmp_path):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "init", "--config", str(_config(tmp_path, nats_cfg={"connect_timeout_s": 1})),
         "--nats", "nats://127.0.0.1:9"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 3 and "cannot reach NATS at nats://127.0.0.1:9" in out.stderr
    assert "Traceback" not in out.stderr


def test_the_owner_retries_a_transient_fault_while_creating_the_topology(nats_server, monkeypatch):
    """A cluster electing a leader answers 503 for a while: the learner's
    start-up waits it out (bounded by bus.topology_wait_s) instead of exiting."""
    from nats.js.errors import ServiceUnavailableError

    from rlvr.actors import topology
    from rlvr.actors.bus import Bus
    from rlvr.actors.config import NatsConfig

    real = topology.ensure_topology
    calls = []

    async def flaky(bus):
        calls.append(1)
        if len(calls) < 3:
            raise ServiceUnavailableError(code=503, description="no leader (an election)")
        return await real(bus)

    monkeypatch.setattr(topology, "ensure_topology", flaky)

    async def main():
        bus = await Bus.connect(NatsConfig(url=nats_server.url), BusConfig(topology_wait_s=30), NAMES, "t")
        try:
            await bus.ensure_topology()
            return bus.owns_topology
        finally:
            await bus.close()

    assert anyio.run(main) is True
    assert len(calls) == 3
    assert BusClient(nats_server.url, RUN).stream_count("SCORED") == 0  # created, empty
