"""Repair without an operator, in-process against a real nats-server.

A role durable deleted mid-run is recreated by the topology's owner (``Bus.keep_topology``)
and the replica pulling from it carries on; the owner's own durable is recreated by its
consumer where it was reading; a deleted stream is recreated by the owner; a stream deleted
under the learner, or younger than the position it resumes from, stops it naming the loss;
a replica whose durable nobody recreates stops naming the command that does.
"""

from __future__ import annotations

import anyio
import pytest

from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.actors.consume import Consumer, ConsumerUnavailableError, Hold
from rlvr.actors.topology import TopologyLostError
from rlvr.protocol import RunNames, Sample, Scored, decode
from tests.factories import make_sample, make_scored

RUN = "rp"


async def _bus(url: str, *, owner: bool, role: str = "verify", **bus) -> Bus:
    cfg = BusConfig(**{"ack_wait_s": 5.0, "fetch_timeout_s": 0.2, "heartbeat_every_s": 0.2,
                       "topology_wait_s": 30.0, **bus})
    b = await Bus.connect(NatsConfig(url=url), cfg, RunNames(RUN), "owner" if owner else role)
    if owner:
        await b.ensure_topology()
    else:
        await b.check_topology(role)
    return b


class _Seen:
    """What a handler was given, with a wait for the n-th distinct id."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self._changed = anyio.Event()

    def add(self, sid: str) -> None:
        self.ids.append(sid)
        self._changed.set()
        self._changed = anyio.Event()

    async def until(self, pred) -> None:
        while not pred(self):
            await self._changed.wait()


def _verifier(bus: Bus, seen: _Seen) -> Consumer:
    async def handle(sample: Sample, delivery) -> None:
        seen.add(sample.sample_id)

    return Consumer(bus, bus.consumer_def("verify"), stage="verify", decode=lambda d: decode(d, Sample),
                    handle=handle, concurrency=2)


def _cause(e: BaseException) -> BaseException:
    while isinstance(e, BaseExceptionGroup):
        e = e.exceptions[0]
    return e


def test_a_deleted_role_durable_is_recreated_by_the_owner_and_its_replica_carries_on(nats_server):
    async def main():
        owner = await _bus(nats_server.url, owner=True)
        replica = await _bus(nats_server.url, owner=False)
        seen = _Seen()
        consumer = _verifier(replica, seen)
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(owner.keep_topology)
            await tg.start(consumer.run, stop)
            with anyio.fail_after(60):
                await owner.publish(owner.names.rollouts, make_sample(RUN, k=1), msg_id="s1")
                await seen.until(lambda s: len(s.ids) == 1)
                await owner.js.delete_consumer(owner.names.stream("ROLLOUTS"), "verify")
                await owner.publish(owner.names.rollouts, make_sample(RUN, k=2), msg_id="s2")
                await seen.until(lambda s: len(set(s.ids)) == 2)
            stop.set()
            tg.cancel_scope.cancel()  # keep_topology runs for ever
        info = await owner.js.consumer_info(owner.names.stream("ROLLOUTS"), "verify")
        await replica.close()
        await owner.close()
        return seen.ids, info.config.filter_subject

    ids, subject = anyio.run(main)
    assert sorted(set(ids)) == ["rp-t1/0", "rp-t2/0"]
    assert subject == RunNames(RUN).rollouts


def test_a_deleted_stream_is_recreated_by_the_owner_with_its_durable(nats_server):
    async def main():
        owner = await _bus(nats_server.url, owner=True)
        replica = await _bus(nats_server.url, owner=False)
        seen = _Seen()
        consumer = _verifier(replica, seen)
        stop = anyio.Event()
        stream = owner.names.stream("ROLLOUTS")
        async with anyio.create_task_group() as tg:
            await tg.start(consumer.run, stop)
            await owner.js.delete_stream(stream)
            tg.start_soon(owner.keep_topology)
            with anyio.fail_after(60):
                # The publish is retried in place until the stream is back (a transient fault).
                from rlvr.actors.retry import call_retrying

                await call_retrying("publish", lambda: owner.publish(owner.names.rollouts, make_sample(RUN, k=3),
                                                                     msg_id="s3"), until=30)
                await seen.until(lambda s: "rp-t3/0" in s.ids)
            stop.set()
            tg.cancel_scope.cancel()
        info = await owner.js.stream_info(stream)
        await replica.close()
        await owner.close()
        return info.config.retention

    retention = anyio.run(main)
    assert getattr(retention, "value", retention) == "workqueue"


def _learner(bus: Bus, seen: _Seen, start_seq: int | None = None) -> Consumer:
    async def handle(scored: Scored, delivery):
        seen.add(f"{scored.sample_id}@{delivery.stream_seq}")
        return Hold()  # custody keeps it until a checkpoint, as the learner does

    return Consumer(bus, bus.consumer_def("learn"), stage="learn", decode=lambda d: decode(d, Scored),
                    handle=handle, concurrency=8, start_seq=start_seq)


def test_the_owners_own_durable_is_recreated_where_it_was_reading(nats_server):
    async def main():
        bus = await _bus(nats_server.url, owner=True)
        seen = _Seen()
        consumer = _learner(bus, seen)
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            await tg.start(consumer.run, stop)
            with anyio.fail_after(60):
                for i in range(3):
                    await bus.publish(bus.names.scored, make_scored(RUN, k=1, i=i), msg_id=f"c{i}")
                await seen.until(lambda s: len(s.ids) == 3)
                await bus.js.delete_consumer(bus.names.stream("SCORED"), "learn")
                await bus.publish(bus.names.scored, make_scored(RUN, k=1, i=3), msg_id="c3")
                await seen.until(lambda s: "rp-t1/3@4" in s.ids)
            stop.set()
        await bus.close()
        return seen.ids, consumer.stats.counters

    ids, counters = anyio.run(main)
    assert counters["consumer_recreated"] == 1
    # The held messages came again from the recreated durable (the oldest held, seq 1, on), then the new one.
    assert ids[:3] == ["rp-t1/0@1", "rp-t1/1@2", "rp-t1/2@3"] and ids.count("rp-t1/0@1") == 2
    assert "rp-t1/3@4" in ids


def test_a_stream_deleted_under_the_learner_stops_it_naming_the_loss(nats_server):
    async def main():
        bus = await _bus(nats_server.url, owner=True)
        seen = _Seen()
        consumer = _learner(bus, seen)
        stop = anyio.Event()
        with pytest.raises(BaseException) as caught:
            async with anyio.create_task_group() as tg:
                await tg.start(consumer.run, stop)
                with anyio.fail_after(60):
                    for i in range(2):
                        await bus.publish(bus.names.scored, make_scored(RUN, k=2, i=i), msg_id=f"d{i}")
                    await seen.until(lambda s: len(s.ids) == 2)
                    await bus.js.delete_stream(bus.names.stream("SCORED"))
                    await anyio.sleep_forever()  # the consumer fails on its own
        await bus.close()
        return _cause(caught.value)

    err = anyio.run(main)
    assert isinstance(err, TopologyLostError), err
    assert f"stream {RunNames(RUN).stream('SCORED')} was deleted and is gone" in str(err)
    assert "at least 2 messages (sequences 1 to 2, delivered here and not yet committed)" in str(err)
    assert "cannot be accounted for" in str(err) and "start a new run" in str(err)


def test_a_learner_resuming_past_the_end_of_a_recreated_stream_refuses_instead_of_skipping(nats_server):
    async def main():
        bus = await _bus(nats_server.url, owner=True)
        for i in range(5):
            await bus.publish(bus.names.scored, make_scored(RUN, k=3, i=i), msg_id=f"e{i}")
        await bus.js.delete_stream(bus.names.stream("SCORED"))
        await bus.ensure_topology()  # a restarted learner: SCORED comes back empty, its floor is 6
        await bus.publish(bus.names.scored, make_scored(RUN, k=4), msg_id="f0")  # stored at seq 1
        with pytest.raises(TopologyLostError) as caught:
            await bus.pull_subscription(bus.consumer_def("learn"), start_seq=6)
        await bus.close()
        return str(caught.value)

    text = anyio.run(main)
    assert "was deleted and was recreated (it ends at sequence 1)" in text and "from sequence 6" in text


def test_a_replica_whose_durable_nobody_recreates_stops_naming_the_fix(nats_server):
    async def main():
        owner = await _bus(nats_server.url, owner=True)  # it created the topology, and is not repairing it
        replica = await _bus(nats_server.url, owner=False, topology_wait_s=1.0)
        consumer = _verifier(replica, _Seen())
        with pytest.raises(BaseException) as caught:
            async with anyio.create_task_group() as tg:
                await tg.start(consumer.run, anyio.Event())  # bound
                await owner.js.delete_consumer(owner.names.stream("ROLLOUTS"), "verify")
                with anyio.fail_after(60):
                    await anyio.sleep_forever()  # the consumer fails on its own, within topology_wait_s
        await replica.close()
        await owner.close()
        return _cause(caught.value)

    err = anyio.run(main)
    assert isinstance(err, ConsumerUnavailableError), err
    assert "consumer 'verify' on stream RLVR_rp_ROLLOUTS was deleted" in str(err)
    assert "rlvr-actor init" in str(err)
