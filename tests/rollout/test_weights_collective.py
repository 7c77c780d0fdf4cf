"""The collective weights transport (``"nccl"`` on the wire, gloo here) end to end on CPU.

The learner's side is the real ``CollectiveHost`` in this process, on a real
nats-server; each replica is a process of its own (tests/rollout/collective_replica.py:
the real ``WeightsWatcher`` and ``hf`` engine with the tiny model), which writes out
every version its engine loaded so the weights can be compared bit for bit.

- weights arrive by broadcast, bit-equal, and the announcement goes over the bus;
- a replica killed in the middle of a broadcast is dropped without holding up the
  learner; restarted, it gets the current version by the object-store fallback (it
  asks through the learner's store), joins again and gets the next one by broadcast;
- a group that never forms (the replica cannot reach the rendezvous) falls back to
  the shared path the announcement names, within the timeout;
- a replica started before the learner listens joins once it does (no version by fallback).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.cli.natsserver import NatsServer
from rlvr.learner.weights.collective import CollectiveHost
from rlvr.learner.config import CollectiveConfig
from rlvr.learner.weights.snapshot import ExportPlan, Snapshot
from rlvr.protocol import RunNames, WeightsAnnouncement, decode
from tests.conftest import REPO

RUN = "coll"
pytestmark = pytest.mark.timeout(180)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _snapshot(src: Path, root: Path, version: int) -> Snapshot:
    """The version a learner would hand over: ``src``'s tensors in memory, exported under ``root`` on demand."""
    from safetensors.torch import load_file

    state = load_file(src / "model.safetensors")
    return Snapshot(version, version, True, dict(sorted(state.items())), ExportPlan(root / "weights"))


class Replica:
    def __init__(self, root: Path, name: str, url: str, model: Path, until: int, collective: dict,
                 die_mid_receive: int = 0) -> None:
        self.out = root / name
        self.out.mkdir(parents=True)
        self.log = self.out / "log.jsonl"
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        cmd = [sys.executable, str(REPO / "tests/rollout/collective_replica.py"), "--nats", url, "--run", RUN,
               "--replica", name, "--model", str(model), "--out", str(self.out), "--until", str(until),
               "--collective", json.dumps(collective), "--die-mid-receive", str(die_mid_receive)]
        with open(self.log, "wb") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def events(self, event: str) -> list[dict]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("event") == event:
                out.append(rec)
        return out

    def dump(self, version: int) -> Path:
        return self.out / f"v{version}.safetensors"

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
        self.proc.wait()


async def until(predicate, timeout_s: float, what: str):
    """Poll a condition under a deadline (never a fixed wait)."""
    try:
        with anyio.fail_after(timeout_s):
            while not (value := predicate()):
                await anyio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout_s}s waiting for {what}") from None
    return value


def _assert_bit_equal(dump: Path, published: Path) -> None:
    import torch
    from safetensors.torch import load_file

    got, want = load_file(dump), load_file(published / "model.safetensors")
    assert set(want) <= set(got)
    for name, t in want.items():
        assert got[name].dtype == t.dtype and torch.equal(got[name].view(torch.uint8), t.view(torch.uint8)), name


class Learner:
    """The learner's side: a bus connection and the collective host, inside one anyio run."""

    def __init__(self, bus: Bus, host: CollectiveHost, root: Path) -> None:
        self.bus, self.host, self.root = bus, host, root

    async def publish(self, src: Path, version: int) -> Path:
        """Hand ``src``'s weights over as version ``version``; the folder they came from."""
        await self.host.publish(_snapshot(src, self.root, version))
        return src


def run_learner(url: str, root: Path, cfg: CollectiveConfig, scenario) -> None:
    async def go() -> None:
        bus = await Bus.connect(NatsConfig(url=url), BusConfig(), RunNames(RUN), "test-learner")
        try:
            await bus.ensure_topology()
            host = CollectiveHost(cfg)
            async with anyio.create_task_group() as tg:
                await tg.start(host.run, bus)
                await scenario(Learner(bus, host, root))
                host.stop()
        finally:
            await bus.close()

    anyio.run(go)


@pytest.fixture
def server(tmp_path: Path):
    with NatsServer(tmp_path / "nats") as s:
        yield s


def test_weights_arrive_by_broadcast_bit_equal(server, tmp_path: Path, tiny_model: Path, weight_dirs):
    port = _free_port()
    cfg = CollectiveConfig(backend="gloo", address=f"127.0.0.1:{port}", timeout_s=10)
    replica = Replica(tmp_path, "r-a", server.url, tiny_model, until=2,
                      collective={"address": f"127.0.0.1:{port}", "timeout_s": 10})

    async def scenario(learner: Learner) -> None:
        await until(lambda: learner.host.members == ["r-a"], 60, "the replica joined")
        v1 = await learner.publish(weight_dirs["perturbed"], 1)
        await until(lambda: replica.dump(1).exists(), 60, "v1 loaded")
        v2 = await learner.publish(weight_dirs["head"], 2)
        await until(lambda: replica.proc.poll() is not None, 60, "v2 loaded")
        assert replica.proc.returncode == 0, replica.log.read_text()[-3000:]
        _assert_bit_equal(replica.dump(1), v1)
        _assert_bit_equal(replica.dump(2), v2)
        # The announcement went over the bus, naming the rendezvous and the tensors' digest.
        msg = await learner.bus.js.get_last_msg(learner.bus.names.stream("WEIGHTS"), learner.bus.names.weights)
        ann = decode(msg.data, WeightsAnnouncement)
        assert (ann.transport, ann.version, ann.location) == ("nccl", 2, f"gloo://127.0.0.1:{port}")
        assert len(ann.tensors_sha256) == 64 and not ann.fallback_path

    try:
        run_learner(server.url, tmp_path, cfg, scenario)
    finally:
        replica.kill()
    loaded = replica.events("weights_loaded")
    assert [(e["version"], e["transport"]) for e in loaded] == [(1, "collective"), (2, "collective")]
    assert not replica.events("weights_collective_fallback")


def test_a_replica_killed_mid_broadcast_is_dropped_and_restarted_gets_the_version_by_fallback(
    server, tmp_path: Path, tiny_model: Path, weight_dirs
):
    port = _free_port()
    cfg = CollectiveConfig(backend="gloo", address=f"127.0.0.1:{port}", timeout_s=10, fallback="object_store")
    # Broadcasts it takes part in: the first version, the header's length, the header, then tensors:
    # it dies on the second tensor, while the learner is sending.
    first = Replica(tmp_path, "r-b", server.url, tiny_model, until=1, die_mid_receive=5,
                    collective={"address": f"127.0.0.1:{port}", "timeout_s": 10})
    later: list[Replica] = []

    async def scenario(learner: Learner) -> None:
        host = learner.host
        await until(lambda: host.members == ["r-b"], 60, "the replica joined")
        t0 = time.monotonic()
        v1 = await learner.publish(weight_dirs["perturbed"], 1)
        assert time.monotonic() - t0 < 5  # announcing does not wait for the broadcast
        await until(lambda: first.proc.poll() is not None, 30, "the replica died mid-broadcast")
        assert first.proc.returncode == 9
        await until(lambda: host.dropped == 1 and not host.members, 15, "the dead replica dropped")
        # Restarted (it knows no address: it learns it from the announcement, which is v1's).
        again = Replica(tmp_path, "r-b2", server.url, tiny_model, until=2, collective={"timeout_s": 10})
        later.append(again)
        await until(lambda: again.dump(1).exists(), 60, "v1 by the fallback")
        await until(lambda: host.members == ["r-b2"], 30, "the restarted replica joined")
        v2 = await learner.publish(weight_dirs["head"], 2)
        await until(lambda: again.proc.poll() is not None, 60, "v2 by broadcast")
        assert again.proc.returncode == 0, again.log.read_text()[-3000:]
        _assert_bit_equal(again.dump(1), v1)
        _assert_bit_equal(again.dump(2), v2)
        assert host.fallbacks_served == 1

    try:
        run_learner(server.url, tmp_path, cfg, scenario)
    finally:
        first.kill()
        for r in later:
            r.kill()
    again = later[0]
    falls = again.events("weights_collective_fallback")
    assert [(e["version"], e["via"]) for e in falls] == [(1, "object_store")]
    assert "not in the collective" in falls[0]["reason"]
    loaded = again.events("weights_loaded")
    assert [(e["version"], e["transport"]) for e in loaded] == [(1, "object_store"), (2, "collective")]


def test_a_group_that_never_forms_falls_back_to_the_path_within_the_timeout(
    server, tmp_path: Path, tiny_model: Path, weight_dirs
):
    port, nobody = _free_port(), _free_port()
    cfg = CollectiveConfig(backend="gloo", address=f"127.0.0.1:{port}", timeout_s=10, fallback="path")
    # The replica is pointed at an address where nothing listens: no join can work.
    replica = Replica(tmp_path, "r-c", server.url, tiny_model, until=1,
                      collective={"address": f"127.0.0.1:{nobody}", "timeout_s": 2})

    async def scenario(learner: Learner) -> None:
        # Its join at start finds nobody there, says so, and tries again until an announcement comes.
        await until(lambda: [e for e in replica.events("retry") if e.get("op") == "collective_join"], 60,
                    "the join at start refused")
        v1 = await learner.publish(weight_dirs["perturbed"], 1)
        await until(lambda: replica.proc.poll() is not None, 60, "v1 by the path fallback")
        assert replica.proc.returncode == 0, replica.log.read_text()[-3000:]
        _assert_bit_equal(replica.dump(1), v1)
        assert not learner.host.members

    try:
        run_learner(server.url, tmp_path, cfg, scenario)
    finally:
        replica.kill()
    falls = replica.events("weights_collective_fallback")
    assert [(e["version"], e["via"]) for e in falls] == [(1, "path")]
    assert "not in the collective" in falls[0]["reason"]
    assert [(e["version"], e["transport"]) for e in replica.events("weights_loaded")] == [(1, "path")]


def test_a_replica_started_before_the_learner_listens_joins_when_it_does_and_takes_v1_by_broadcast(
    server, tmp_path: Path, tiny_model: Path, weight_dirs
):
    async def topology() -> None:  # the run's streams, as a learner that is still starting has made them
        bus = await Bus.connect(NatsConfig(url=server.url), BusConfig(), RunNames(RUN), "test-init")
        try:
            await bus.ensure_topology()
        finally:
            await bus.close()

    anyio.run(topology)
    port = _free_port()
    cfg = CollectiveConfig(backend="gloo", address=f"127.0.0.1:{port}", timeout_s=10)
    replica = Replica(tmp_path, "r-d", server.url, tiny_model, until=1,
                      collective={"address": f"127.0.0.1:{port}", "timeout_s": 10})
    try:
        # Nothing listens yet: the replica says it will try again (before: its join sat in the store
        # client's own backoff, silent, and the first versions went by the fallback).
        anyio.run(until, lambda: [e for e in replica.events("retry") if e.get("op") == "collective_join"], 60,
                  "the replica's join retried")

        async def scenario(learner: Learner) -> None:
            await until(lambda: learner.host.members == ["r-d"], 60, "the replica joined")
            v1 = await learner.publish(weight_dirs["perturbed"], 1)
            await until(lambda: replica.proc.poll() is not None, 60, "v1 loaded")
            assert replica.proc.returncode == 0, replica.log.read_text()[-3000:]
            _assert_bit_equal(replica.dump(1), v1)

        run_learner(server.url, tmp_path, cfg, scenario)
    finally:
        replica.kill()
    assert [(e["version"], e["transport"]) for e in replica.events("weights_loaded")] == [(1, "collective")]
