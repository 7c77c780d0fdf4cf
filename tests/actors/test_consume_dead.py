"""Dead-lettering never kills the actor (issue 12, confirmed defect 3).

In-process consumers against a real nats-server: a message too large to copy
into DEAD goes there as a reference, and while DEAD cannot take a letter at
all the message stays un-acked, the failure is counted, and the consumer
keeps serving other messages until DEAD is back.
"""

from __future__ import annotations

import anyio

from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.actors.consume import Consumer
from rlvr.protocol import DeadLetter, RunNames, Sample, decode
from tests.actors.deadwatch import DeadLetterWatch
from tests.busclient import BusClient
from tests.factories import make_sample

RUN = "cd"


async def _bus(url: str) -> Bus:
    cfg = BusConfig(ack_wait_s=5.0, nak_delay_s=0.05, fetch_timeout_s=0.2, max_deliver=3)
    bus = await Bus.connect(NatsConfig(url=url, request_timeout_s=1.0), cfg, RunNames(RUN), "test")
    await bus.ensure_topology()
    return bus


def _consumer(bus: Bus, handled: list[str], was_handled: anyio.Event) -> Consumer[Sample]:
    async def handle(sample: Sample, delivery) -> None:
        handled.append(sample.sample_id)
        was_handled.set()  # the drain then waits for its ack

    return Consumer(bus, bus.consumer_def("verify"), stage="verify", decode=lambda d: decode(d, Sample),
                    handle=handle, concurrency=2)


def test_a_message_of_max_payload_minus_one_bytes_is_dead_lettered_as_a_reference_and_the_actor_goes_on(nats_server):
    # Regression: the copy in a DeadLetter is larger than max_payload, publishing
    # it raised MaxPayloadError, and the exception ended the consumer (the actor exited 1).
    handled: list[str] = []

    async def main():
        bus = await _bus(nats_server.url)
        size = bus.nc.max_payload - 1
        good_handled, dead = anyio.Event(), DeadLetterWatch(bus)
        consumer = _consumer(bus, handled, good_handled)
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            await tg.start(consumer.run, stop)
            await bus.nc.publish(bus.names.rollouts, b"\xc1" * size)  # not msgpack, and as large as NATS allows
            await bus.nc.flush()
            await bus.publish(bus.names.rollouts, make_sample(RUN, k=1), msg_id="good")
            with anyio.fail_after(20):
                await dead.until(lambda w: w.stored >= 1)  # the drain waits for its term and count
                await good_handled.wait()
            stop.set()
        await bus.close()
        return consumer.stats.counters, size

    counters, size = anyio.run(main)
    assert handled == [f"{RUN}-t1/0"]
    assert counters["dead_letter.malformed"] == 1 and counters["dead_letter_references"] == 1
    (letter,) = BusClient(nats_server.url, RUN).decoded("DEAD", DeadLetter)
    assert letter.reference and letter.size == size and letter.stream == f"RLVR_{RUN}_ROLLOUTS"
    assert letter.stream_seq == 1 and letter.subject == f"rlvr.{RUN}.rollouts" and "msgpack" in letter.reason
    assert 0 < len(letter.data) < 64 * 1024  # a prefix, not a copy


def test_while_dead_refuses_letters_the_message_stays_unacked_counted_and_the_consumer_serves_others(nats_server):
    handled: list[str] = []
    seen: dict[str, object] = {}

    async def main():
        bus = await _bus(nats_server.url)
        await bus.js.delete_stream(bus.names.stream("DEAD"))  # DEAD unavailable: every dead letter fails
        good_handled, dead = anyio.Event(), DeadLetterWatch(bus)
        consumer = _consumer(bus, handled, good_handled)
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            await tg.start(consumer.run, stop)
            await bus.publish(bus.names.rollouts, make_sample(RUN, k=1, i=7, n=4), msg_id="poison")  # index >= n
            with anyio.fail_after(20):
                # A third try begun: the first two were refused, counted, and backed off from.
                await dead.until(lambda w: w.attempts >= 3)
            assert dead.refused >= 2 and dead.stored == 0
            seen["failures"] = consumer.stats.counters["dead_letter_failures"]
            seen["retrying"] = consumer.stats.counters["dead_letter_retrying"]
            seen["ack_pending"] = (await bus.js.consumer_info(bus.names.stream("ROLLOUTS"), "verify")).num_ack_pending
            await bus.publish(bus.names.rollouts, make_sample(RUN, k=2), msg_id="good")
            with anyio.fail_after(20):
                await good_handled.wait()
            await bus.ensure_topology()  # DEAD is back
            with anyio.fail_after(20):
                await dead.until(lambda w: w.stored >= 1)  # the drain waits for its term and count
            stop.set()
        await bus.close()
        return consumer.stats.counters

    counters = anyio.run(main)
    assert seen["failures"] >= 2 and seen["retrying"] == 1  # counted while DEAD refused it
    assert seen["ack_pending"] == 1  # kept, not acked, while DEAD refused it
    assert handled == [f"{RUN}-t2/0"]  # served others meanwhile
    assert counters["dead_letter_retrying"] == 0 and counters["dead_letter.invalid"] == 1
    (letter,) = BusClient(nats_server.url, RUN).decoded("DEAD", DeadLetter)
    assert letter.kind == "invalid" and "sample_index" in letter.reason and not letter.reference
