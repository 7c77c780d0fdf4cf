"""The feeder: deterministic task order, bounded tasks in flight, curricula."""

from __future__ import annotations

import anyio

from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.learner.config import ArithmeticDataset
from rlvr.learner.datasets import load_splits
from rlvr.learner.feeder import Feeder
from rlvr.protocol import RunNames, SamplingParams, Task
from tests.busclient import BusClient

SPLITS = load_splits(ArithmeticDataset(max_operand=9, holdout=20), seed=0)


class _Names:  # the order of tasks needs only the run's names, not a connection
    names = RunNames("f")


def _feeder(**kw) -> Feeder:
    return Feeder(_Names(), SPLITS.train, group_size=4, sampling=SamplingParams(), max_inflight=4, seed=7, **kw)  # type: ignore[arg-type]


def test_task_order_is_a_pure_function_of_seed_and_index():
    a, b = _feeder(), _feeder()
    assert [a.spec_for(k) for k in range(300)] == [b.spec_for(k) for k in range(300)]
    assert a.task_id(12) == "f-t12"


def test_each_epoch_visits_every_training_problem_once():
    f = _feeder()
    n = len(SPLITS.train)
    epoch = [f.spec_for(k).index for k in range(n)]
    assert sorted(epoch) == sorted(t.index for t in SPLITS.train)
    assert [f.spec_for(k).index for k in range(n, 2 * n)] != epoch  # reshuffled


def test_heldout_problems_never_appear_in_training():
    held = {t.prompt for t in SPLITS.heldout}
    assert held and not held & {t.prompt for t in SPLITS.train}


def test_by_level_curriculum_goes_easy_first():
    splits = load_splits(ArithmeticDataset(max_operand=99, holdout=0, pad_operands=False), seed=0)
    f = Feeder(_Names(), splits.train, group_size=4, sampling=SamplingParams(), max_inflight=4, seed=1,  # type: ignore[arg-type]
               curriculum="by_level")
    levels = [f.spec_for(k).level for k in range(len(splits.train))]
    assert levels == sorted(levels)


def test_feeder_keeps_at_most_max_inflight_tasks_outstanding(nats_server):
    async def main():
        bus = await Bus.connect(NatsConfig(url=nats_server.url), BusConfig(), RunNames("f"), "t")
        await bus.ensure_topology()
        f = Feeder(bus, SPLITS.train, group_size=4, sampling=SamplingParams(), max_inflight=4, seed=7)
        async with anyio.create_task_group() as tg:
            tg.start_soon(f.run)
            with anyio.fail_after(10):
                while len(f.outstanding) < 4:
                    await anyio.sleep(0.01)
            issued = f.issued
            f.done("f-t0")
            with anyio.fail_after(10):
                while f.issued == issued:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        await bus.close()
        return f

    f = anyio.run(main)
    assert f.issued == 5 and len(f.outstanding) == 4
    tasks = BusClient(nats_server.url, "f").decoded("TASKS", Task)
    assert [t.task_id for t in tasks] == [f"f-t{k}" for k in range(5)]
