"""The consume loop's fast path (``forward``), in-process against a real nats-server.

A ``forward`` turns a message into its output as the loop pulls it; the loop
publishes the outputs of a pull together and acks each input only once its
output is stored. What it leaves (None) goes to the handler; a ``Term`` is
dead-lettered; an exception is a fault of that message alone.
"""

from __future__ import annotations

import anyio
import nats
from nats.js.api import StreamConfig

from rlvr.actors.consume import Consumer, Forward, Term
from rlvr.protocol import DeadLetter, Sample, Scored, Verdict, decode
from tests.actors.deadwatch import DeadLetterWatch
from tests.actors.test_consume import RUN, _bus, _run_until
from tests.busclient import BusClient
from tests.factories import make_sample


class SendWatch:
    """Wraps ``bus.pub_acks`` (the real call does the work) and wakes ``until``'s
    waiters on every PubAck or failure it hands back: no polling."""

    def __init__(self, bus) -> None:
        self.stored = self.failed = 0
        self._changed = anyio.Event()
        real = bus.pub_acks

        async def pub_acks(futures):
            results = await real(futures)
            self.failed += sum(isinstance(r, Exception) for r in results)
            self.stored += sum(not isinstance(r, Exception) for r in results)
            self._changed.set()
            self._changed = anyio.Event()
            return results

        bus.pub_acks = pub_acks

    async def until(self, cond) -> None:
        while not cond(self):
            await self._changed.wait()


def _scored(bus, subject=None):
    def forward(sample: Sample, delivery) -> Forward:
        scored = Scored(sample=sample, verdict=Verdict(1.0, "ok", "exact"), replica="fwd")
        return Forward(subject or bus.names.scored, scored, bus.headers_for(sample.sample_id))

    return forward


def _consumer(bus, forward, handle=None, **kw) -> Consumer:
    async def no_handler(sample, delivery):
        raise AssertionError(f"the handler got {sample.sample_id}")

    return Consumer(bus, bus.consumer_def("verify"), stage="verify", decode=lambda d: decode(d, Sample),
                    handle=handle or no_handler, concurrency=16, forward=forward, **kw)


def test_forwarded_outputs_are_stored_with_their_ids_and_every_input_is_acked(nats_server):
    async def main():
        bus = await _bus(nats_server.url)
        consumer = _consumer(bus, _scored(bus))
        for k in range(10):
            for i in range(4):
                await bus.publish(bus.names.rollouts, make_sample(RUN, k=k, i=i), msg_id=f"{RUN}-t{k}/{i}")
        sends = SendWatch(bus)  # the outputs' PubAcks from here on
        await _run_until(consumer, lambda: sends.until(lambda w: w.stored >= 40))
        info = await bus.js.consumer_info(bus.names.stream("ROLLOUTS"), "verify")
        await bus.close()
        return consumer.stats.counters, info

    counters, info = anyio.run(main)
    assert counters["received"] == 40 and counters["acked"] == 40 and counters["faults"] == 0
    assert info.num_ack_pending == 0 and info.num_pending == 0
    stored = BusClient(nats_server.url, RUN).stream_messages("SCORED")
    assert sorted(h["Nats-Msg-Id"] for _, _, h in stored) == sorted(f"{RUN}-t{k}/{i}" for k in range(10) for i in range(4))
    assert all(decode(data, Scored).replica == "fwd" for _, data, _ in stored)


def test_a_forward_that_raises_faults_only_its_own_message(nats_server):
    async def main():
        bus = await _bus(nats_server.url)  # max_deliver 3
        good = _scored(bus)

        def forward(sample, delivery):
            if sample.task_id == f"{RUN}-t3":
                raise ValueError("cannot score this one")
            return good(sample, delivery)

        consumer = _consumer(bus, forward)
        for k in range(6):
            await bus.publish(bus.names.rollouts, make_sample(RUN, k=k), msg_id=f"m{k}")
        dead, sends = DeadLetterWatch(bus), SendWatch(bus)

        async def settled():
            await dead.until(lambda w: w.stored >= 1)
            await sends.until(lambda w: w.stored >= 5)

        await _run_until(consumer, settled)
        await bus.close()
        return consumer.stats.counters

    counters = anyio.run(main)
    assert counters["faults"] == 3 and counters["naked"] == 2 and counters["poison_pills"] == 1
    assert counters["acked"] == 5
    letters = BusClient(nats_server.url, RUN).decoded("DEAD", DeadLetter)
    assert len(letters) == 1 and letters[0].kind == "poison" and "cannot score this one" in letters[0].reason
    assert len(BusClient(nats_server.url, RUN).stream_messages("SCORED")) == 5


def test_what_forward_leaves_goes_to_the_handler_and_a_term_is_dead_lettered(nats_server):
    handled: list[str] = []

    async def main():
        bus = await _bus(nats_server.url)
        good = _scored(bus)

        def forward(sample, delivery):
            if sample.sample_index == 0:
                return None  # needs the slow path
            if sample.sample_index == 1:
                return Term("refused by forward", "Refused", kind="invalid")
            return good(sample, delivery)

        async def handle(sample, delivery):
            handled.append(sample.sample_id)
            await bus.publish(bus.names.scored, Scored(sample=sample, verdict=Verdict(0.0, "wrong", "exact"),
                                                       replica="lane"), msg_id=sample.sample_id)

        consumer = _consumer(bus, forward, handle)
        for i in range(3):
            await bus.publish(bus.names.rollouts, make_sample(RUN, i=i), msg_id=f"m{i}")
        dead, sends = DeadLetterWatch(bus), SendWatch(bus)

        async def settled():
            await dead.until(lambda w: w.stored >= 1)
            await sends.until(lambda w: w.stored >= 1)

        await _run_until(consumer, settled)
        await bus.close()
        return consumer.stats.counters

    counters = anyio.run(main)
    assert handled == [f"{RUN}-t0/0"]
    assert counters["acked"] == 2 and counters["dead_letter.invalid"] == 1
    letters = BusClient(nats_server.url, RUN).decoded("DEAD", DeadLetter)
    assert [x.reason for x in letters] == ["refused by forward"]
    replicas = sorted(decode(d, Scored).replica for _, d, _ in BusClient(nats_server.url, RUN).stream_messages("SCORED"))
    assert replicas == ["fwd", "lane"]


def test_an_output_the_bus_cannot_store_keeps_its_input_unacked_until_it_can(nats_server):
    nowhere = f"{RUN}.nowhere"  # no stream takes it yet: every publish fails, a transient bus fault

    async def main():
        bus = await _bus(nats_server.url)
        consumer = _consumer(bus, _scored(bus, nowhere))
        await bus.publish(bus.names.rollouts, make_sample(RUN), msg_id="m0")
        sends = SendWatch(bus)
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            await tg.start(consumer.run, stop)
            with anyio.fail_after(30):
                await sends.until(lambda w: w.failed >= 3)  # the first try and two retries in place
                before = dict(consumer.stats.counters)
                nc = await nats.connect(nats_server.url)
                await nc.jetstream().add_stream(StreamConfig(name="CT_NOWHERE", subjects=[nowhere]))
                await nc.close()
                await sends.until(lambda w: w.stored >= 1)
            stop.set()
        info = await bus.js.consumer_info(bus.names.stream("ROLLOUTS"), "verify")
        await bus.close()
        return before, consumer.stats.counters, info

    before, after, info = anyio.run(main)
    assert before["acked"] == 0 and before["bus_retries"] >= 2 and before["faults"] == 0
    assert after["acked"] == 1 and after["faults"] == 0 and after["dead_lettered"] == 0
    assert info.num_ack_pending == 0 and info.num_redelivered == 0  # kept alive in place, never redelivered


def test_a_stop_gives_back_an_input_whose_output_is_still_unstored(nats_server):
    nowhere = f"{RUN}.nowhere"
    deliveries: list[int] = []

    async def main():
        bus = await _bus(nats_server.url, drain_timeout_s=0.5)
        await bus.publish(bus.names.rollouts, make_sample(RUN), msg_id="m0")
        sends = SendWatch(bus)
        first = _consumer(bus, _scored(bus, nowhere))
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            await tg.start(first.run, stop)
            with anyio.fail_after(30):
                await sends.until(lambda w: w.failed >= 1)
            stop.set()  # the drain deadline cuts the retry short: the input goes back
        good = _scored(bus)

        def forward(sample, delivery):
            deliveries.append(delivery.num_delivered)
            return good(sample, delivery)

        second = _consumer(bus, forward)  # another replica, whose outputs can be stored
        await _run_until(second, lambda: sends.until(lambda w: w.stored >= 1))
        await bus.close()
        return first.stats, second.stats.counters

    first, second = anyio.run(main)
    assert first.counters["acked"] == 0 and first.counters["naked"] == 1 and first.in_flight == 0
    assert second["acked"] == 1 and deliveries == [2]  # the same message, delivered again, nothing lost
    assert len(BusClient(nats_server.url, RUN).stream_messages("SCORED")) == 1
