"""While samples keep failing the feeder waits before each task (issue 44: a failing agent's tasks were
regenerated at machine speed, 283 episodes a second); at the first usable sample it issues at once again."""

from __future__ import annotations

import time

import anyio

from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.learner.config import ArithmeticDataset
from rlvr.learner.data.datasets import load_splits
from rlvr.learner.data.feeder import Feeder
from rlvr.protocol import RunNames, SamplingParams

SPLITS = load_splits(ArithmeticDataset(max_operand=9, holdout=20), seed=0)


def test_the_feeder_waits_its_delay_before_each_task_and_issues_at_once_without_one(nats_server):
    async def main() -> tuple[float, Feeder]:
        bus = await Bus.connect(NatsConfig(url=nats_server.url), BusConfig(), RunNames("f"), "t")
        await bus.ensure_topology()
        f = Feeder(bus, SPLITS.train, group_size=4, sampling=SamplingParams(), max_inflight=4, seed=7)
        f.delay_s = 0.5  # what the learner sets while samples fail (FailureWatch.backoff_s)
        async with anyio.create_task_group() as tg:
            started = time.monotonic()
            tg.start_soon(f.run)
            with anyio.fail_after(60):
                while f.issued < 4:
                    await anyio.sleep(0.01)
            backed_off = time.monotonic() - started  # a lower bound: a busy machine only makes it longer
            f.delay_s = 0.0  # a usable sample came
            for k in range(4):
                f.done(f"f-t{k}")
            with anyio.fail_after(60):
                while f.issued < 8:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        await bus.close()
        return backed_off, f

    backed_off, f = anyio.run(main)
    assert backed_off >= 4 * 0.5, backed_off
    assert f.counters["backoff_waits"] == 4  # one per task while the delay was set, none after
