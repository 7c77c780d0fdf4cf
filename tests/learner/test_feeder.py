"""The feeder: deterministic task order, bounded tasks in flight, curricula."""

from __future__ import annotations

import anyio

from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.learner.config import ArithmeticDataset
from rlvr.learner.data.datasets import load_splits
from rlvr.learner.data.feeder import Feeder
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


# --- faults never end the learner (issue 12) -----------------------------------------------


def test_a_failed_task_publish_is_retried_counted_and_lands_once_the_stream_is_back(nats_server):
    # No TASKS stream yet: every publish fails (no responders) as it would
    # while the server restarts; the feeder must wait it out, not raise.
    async def main():
        bus = await Bus.connect(NatsConfig(url=nats_server.url, request_timeout_s=0.5), BusConfig(),
                                RunNames("f"), "t")
        f = Feeder(bus, SPLITS.train, group_size=4, sampling=SamplingParams(), max_inflight=4, seed=7,
                   publish_backoff_max_s=0.2)
        async with anyio.create_task_group() as tg:
            tg.start_soon(f.publish_one)
            with anyio.fail_after(20):
                while f.counters["publish_retry"] < 2:
                    await anyio.sleep(0.01)
            assert f.issued == 0 and not f.outstanding
            await bus.ensure_topology()
            with anyio.fail_after(20):
                while f.issued < 1:
                    await anyio.sleep(0.01)
        await bus.close()
        return f

    f = anyio.run(main)
    assert list(f.outstanding) == ["f-t0"] and f.counters["publish_retry"] >= 2
    assert [t.task_id for t in BusClient(nats_server.url, "f").decoded("TASKS", Task)] == ["f-t0"]


def test_republished_duplicates_after_a_restart_are_counted_and_their_slots_expire(nats_server):
    async def main():
        bus = await Bus.connect(NatsConfig(url=nats_server.url), BusConfig(), RunNames("f"), "t")
        await bus.ensure_topology()
        first = Feeder(bus, SPLITS.train, group_size=4, sampling=SamplingParams(), max_inflight=2, seed=7)
        for _ in range(2):
            await first.publish_one()
        # A restart from a checkpoint taken before these tasks: the same ids again.
        again = Feeder(bus, SPLITS.train, group_size=4, sampling=SamplingParams(), max_inflight=2, seed=7,
                       task_timeout_s=0.5)
        async with anyio.create_task_group() as tg:
            tg.start_soon(again.run)
            # No group of these tasks ever completes: their slots must still free up.
            with anyio.fail_after(20):
                while again.issued < 4:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        await bus.close()
        return again

    f = anyio.run(main)
    assert f.counters["republished_duplicate"] == 2
    assert f.counters["task_expired"] >= 2 and "f-t0" not in f.outstanding
    assert [t.task_id for t in BusClient(nats_server.url, "f").decoded("TASKS", Task)] == [f"f-t{k}" for k in range(4)]


def test_a_group_completed_before_its_task_is_republished_takes_no_slot(nats_server):
    async def main():
        bus = await Bus.connect(NatsConfig(url=nats_server.url), BusConfig(), RunNames("f"), "t")
        await bus.ensure_topology()
        first = Feeder(bus, SPLITS.train, group_size=4, sampling=SamplingParams(), max_inflight=2, seed=7)
        await first.publish_one()
        # A restart with no checkpoint: the replay of SCORED completes f-t0's group before the feeder
        # publishes f-t0 again (a duplicate JetStream drops): nothing is left to come for it.
        again = Feeder(bus, SPLITS.train, group_size=4, sampling=SamplingParams(), max_inflight=2, seed=7)
        again.done("f-t0", [1.0, 0.0, 0.0, 0.0], 0)
        await again.publish_one()
        await again.publish_one()
        await bus.close()
        return again

    f = anyio.run(main)
    assert list(f.outstanding) == ["f-t1"], f.outstanding
    assert f.counters["done_before_issued"] == 1 and f.counters["republished_duplicate"] == 1


def test_expire_frees_only_tasks_older_than_the_timeout():
    f = _feeder(task_timeout_s=10.0)
    f.outstanding = {"f-t0": 100.0, "f-t1": 105.0}
    assert f.expire(now=112.0) == ["f-t0"] and list(f.outstanding) == ["f-t1"]
    assert f.counters["task_expired"] == 1
