"""A rollout replica's weights path in a process of its own, for test_weights_collective.py.

The real ``WeightsWatcher`` (bus subscription, collective, fallbacks) and the real
``hf`` engine with the tiny model; only the generation side of the rollout actor
is left out (the test is about weights). Every version the engine loads is written
out as ``<out>/v<N>.safetensors`` (the engine's own state dict, so a test can check
it bit for bit), then the process exits once it serves ``--until``.

``--die-mid-receive K`` ends the process (``os._exit``) at the K-th broadcast it
takes part in: the way to kill a peer in the middle of a broadcast, at a known point.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import anyio


class _Ctx:
    def __init__(self, replica: str) -> None:
        self.replica = replica


class _Actor:
    """The parts of RolloutActor the watcher reads."""

    def __init__(self, engine, replica: str) -> None:
        self.engine = engine
        self.ctx = _Ctx(replica)
        self.weights_fetch_s = 0.0
        self.weights_load_s = 0.0

    @property
    def version(self) -> int:
        return self.engine.weights_version

    def abort_in_flight(self) -> int:
        return 0


def _die_at(k: int) -> None:
    from rlvr.actors import collective as wire

    real = wire._bcast
    calls = [0]

    def bcast(pg, tensor, timeout_s):
        calls[0] += 1
        if calls[0] >= k:
            os._exit(9)
        return real(pg, tensor, timeout_s)

    wire._bcast = bcast


def _dump(engine, path: Path) -> None:
    from safetensors.torch import save_file

    state = {k: v.detach().clone().contiguous() for k, v in engine._model.state_dict().items()}
    tmp = path.with_suffix(".tmp")
    save_file(state, tmp)
    tmp.rename(path)


async def main(a: argparse.Namespace) -> None:
    from rlvr.actors.bus import Bus
    from rlvr.actors.config import BusConfig, NatsConfig
    from rlvr.actors.logs import configure_logging
    from rlvr.protocol import RunNames
    from rlvr.rollout.config import RolloutCollectiveConfig, RolloutConfig
    from rlvr.rollout.engines.base import HFEngineConfig
    from rlvr.rollout.engines.hf import HFEngine
    from rlvr.rollout.weights_sync import WeightsWatcher
    import msgspec

    configure_logging(run=a.run, role="rollout", replica=a.replica, fmt="json", level="debug")
    if a.die_mid_receive:
        _die_at(a.die_mid_receive)
    engine_cfg = HFEngineConfig(model=a.model)
    cfg = RolloutConfig(
        engine=engine_cfg, weights_cache_dir=str(Path(a.out) / "cache"),
        collective=msgspec.convert(json.loads(a.collective), RolloutCollectiveConfig),
    )
    engine = HFEngine(engine_cfg)
    await engine.start()
    bus = await Bus.connect(NatsConfig(url=a.nats), BusConfig(), RunNames(a.run), a.replica)
    out = Path(a.out)
    try:
        watcher = WeightsWatcher(bus, _Actor(engine, a.replica), cfg)
        async with anyio.create_task_group() as tg:
            await tg.start(watcher.run)
            (out / "ready").write_text("1")
            seen = 0
            while engine.weights_version < a.until:
                if engine.weights_version != seen:
                    seen = engine.weights_version
                    await anyio.to_thread.run_sync(_dump, engine, out / f"v{seen}.safetensors")
                await anyio.sleep(0.02)  # polls the engine's version: the process's own exit condition
            await anyio.to_thread.run_sync(_dump, engine, out / f"v{engine.weights_version}.safetensors")
            tg.cancel_scope.cancel()
    finally:
        await bus.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--nats", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--replica", default="rollout-c")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--until", type=int, required=True)
    p.add_argument("--collective", default="{}")
    p.add_argument("--die-mid-receive", type=int, default=0)
    anyio.run(main, p.parse_args())
