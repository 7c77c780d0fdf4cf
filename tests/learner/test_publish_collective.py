"""The learner's side of weights by collective: what the training loop waits for, and which
versions leave an export folder (learner/weights/snapshot.py, learner/weights/collective.py).

A real ``Trainer`` (DeepSpeed on CPU, a tiny tied Qwen2 built here), a real nats-server and the
real ``CollectiveHost`` (gloo); no replica joins (tests/rollout/test_weights_collective.py has
them). The host's digest is held on an event where a test needs the loop's side alone: the loop
must get its publish back while the digest is still to come.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import anyio
import pytest
import torch
from safetensors.torch import load_file

from rlvr.actors import collective as wire
from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.learner.config import CollectiveConfig
from rlvr.learner.engine_config import TrainEngineConfig
from rlvr.learner.train.trainer import Trainer
from rlvr.learner.weights.collective import CollectiveHost
from rlvr.protocol import RunNames, WeightsAnnouncement, decode
from rlvr.rollout.weights import verify_weight_files
from tests.learner.engine_helpers import build_tiny_qwen

RUN = "pubcoll"
pytestmark = pytest.mark.timeout(300)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _announcement(bus: Bus, version: int, timeout_s: float = 60) -> WeightsAnnouncement:
    """The newest announcement once it is ``version`` (polled under a deadline)."""
    with anyio.fail_after(timeout_s):
        while True:
            try:
                msg = await bus.js.get_last_msg(bus.names.stream("WEIGHTS"), bus.names.weights)
            except Exception:  # none yet
                msg = None
            if msg is not None:
                ann = decode(msg.data, WeightsAnnouncement)
                if ann.version >= version:
                    return ann
            await anyio.sleep(0.05)


def _as_published(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The engine's weights as a replica gets them: a copy, name order, the tied head present."""
    out = {k: v.detach().clone() for k, v in state.items()}
    out.setdefault("lm_head.weight", out["model.embed_tokens.weight"])
    return dict(sorted(out.items()))


def _run(nats_url: str, tmp_path: Path, cfg: CollectiveConfig, scenario) -> None:
    """``scenario(trainer, bus, host)`` with the host running; the host stopped after it."""

    async def go() -> None:
        trainer = Trainer(TrainEngineConfig(model_path=str(build_tiny_qwen(tmp_path / "model")), zero_stage=0),
                          seed=0)
        await trainer.start(None)
        bus = await Bus.connect(NatsConfig(url=nats_url), BusConfig(), RunNames(RUN), "test-learner")
        try:
            await bus.ensure_topology()
            host = CollectiveHost(cfg)
            async with anyio.create_task_group() as tg:
                await tg.start(host.run, bus)
                await scenario(trainer, bus, host)
                host.stop()
        finally:
            await bus.close()
            await trainer.close()

    anyio.run(go)


def test_the_loop_waits_for_a_copy_of_the_weights_not_for_their_digest_nor_a_file(
    nats_server, tmp_path: Path, monkeypatch
):
    # The host's digest waits for this event: publish must return before it is set.
    digest_may_run = threading.Event()
    real_header_for = wire.header_for

    def held_header_for(version, state):
        assert digest_may_run.wait(120), "the test never released the digest"
        return real_header_for(version, state)

    monkeypatch.setattr(wire, "header_for", held_header_for)
    root = tmp_path / "out" / "weights"
    cfg = CollectiveConfig(backend="gloo", address=f"127.0.0.1:{_free_port()}", timeout_s=10)
    seen: dict = {}

    async def scenario(trainer: Trainer, bus: Bus, host: CollectiveHost) -> None:
        published = _as_published(trainer.engine.full_state_dict())
        with anyio.fail_after(60):  # before the change the loop hashed (and exported) here: it never returned
            await trainer.publish(bus, root, 1, 1, "nccl", collective=host)
        assert not (root / "v1").exists()  # no file for the broadcast
        with pytest.raises(TimeoutError):
            await _announcement(bus, 1, timeout_s=0.5)  # not announced before its digest exists
        # Training goes on: the version handed over is a copy, not the live parameters.
        with torch.no_grad():
            for p in trainer.engine.ds.module.parameters():
                p.add_(1.0)
        digest_may_run.set()
        ann = await _announcement(bus, 1)
        seen.update(ann=ann, published=published)
        assert not (root / "v1").exists()  # no replica asked for it, and it is not a kept version

    _run(nats_server.url, tmp_path, cfg, scenario)
    ann, published = seen["ann"], seen["published"]
    assert (ann.transport, ann.files, ann.fallback_path) == ("nccl", [], "")
    assert ann.tensors_sha256 == wire.tensors_sha256(published.items())
    assert ann.bytes == sum(t.numel() * t.element_size() for t in published.values())
    # The host stopped: the newest version is left as a complete model folder (eval --checkpoint).
    exported = load_file(root / "v1" / "model.safetensors")
    assert (root / "v1" / "config.json").is_file()
    assert exported.keys() == published.keys()
    assert all(torch.equal(exported[k], published[k]) for k in published)


@pytest.mark.parametrize("fallback", ["object_store", "path"])
def test_an_export_folder_is_written_only_where_something_reads_it(nats_server, tmp_path: Path, fallback):
    root = tmp_path / "out" / "weights"
    cfg = CollectiveConfig(backend="gloo", address=f"127.0.0.1:{_free_port()}", timeout_s=10, fallback=fallback)
    folders: dict[int, bool] = {}

    async def scenario(trainer: Trainer, bus: Bus, host: CollectiveHost) -> None:
        for v in (1, 2, 3):
            with torch.no_grad():  # each version differs, as after a step
                for p in trainer.engine.ds.module.parameters():
                    p.mul_(1.0 + 0.01 * v)
            published = _as_published(trainer.engine.full_state_dict())
            await trainer.publish(bus, root, v, v, "nccl", keep_every=2, collective=host)
            ann = await _announcement(bus, v)
            # Each copy is intact when announced (buffers are reused: test_snapshot.py).
            assert ann.tensors_sha256 == wire.tensors_sha256(published.items()), v
            if fallback == "path":
                # The folder the announcement names is complete when the announcement is seen.
                assert ann.fallback_path == str((root / f"v{v}").resolve())
                await anyio.to_thread.run_sync(verify_weight_files, Path(ann.fallback_path), ann.files)
        # The publisher takes one version at a time: v2's kept export was written before it took v3,
        # and v3 (not kept) has nothing after its announcement.
        folders.update({v: (root / f"v{v}" / "model.safetensors").is_file() for v in (1, 2, 3)})

    _run(nats_server.url, tmp_path, cfg, scenario)
    if fallback == "path":  # every version, the last two kept (and every second one)
        assert folders == {1: False, 2: True, 3: True}
    else:  # the kept version only, until the host stops
        assert folders == {1: False, 2: True, 3: False}
    assert (root / "v3" / "model.safetensors").is_file()  # the newest, left when the host stopped
