"""The keep-alive of messages in hand, against a real nats-server: one ticker keeps them alive past
ack_wait, and when the event loop stalls past the keep-alive's margin (a busy machine, issue 44) the
stall is said and the server's redelivery of work still in hand is absorbed, never run twice."""

from __future__ import annotations

import time

import anyio
from structlog.testing import capture_logs

from rlvr.actors.consume import Consumer
from rlvr.protocol import DeadLetter, Sample, decode
from tests.actors.test_consume import RUN, _bus, _run_until
from tests.busclient import BusClient
from tests.factories import make_sample


def _held_past_ack_wait(nats_server, keep_alive_every_s, *, hold_s: float = 2.5):
    """One message whose handler holds it for ``hold_s`` (ack_wait is 1 s), or until the server has
    redelivered it (the consumer absorbs that: ``redelivered_in_hand``): the deliveries the handler
    saw, and the consumer's counters once it drained."""
    seen: list[int] = []

    async def main():
        bus = await _bus(nats_server.url, ack_wait_s=1.0)
        finished = anyio.Event()

        async def handle(sample: Sample, delivery):
            seen.append(delivery.num_delivered)
            if delivery.num_delivered > 1:  # the work run a second time
                finished.set()
                return
            with anyio.move_on_after(hold_s):  # the long work under test; it ends early once redelivered
                while not consumer.stats.counters["redelivered_in_hand"]:
                    await anyio.sleep(0.02)
            finished.set()

        consumer = Consumer(bus, bus.consumer_def("verify"), stage="verify", decode=lambda d: decode(d, Sample),
                            handle=handle, concurrency=2, keep_alive_every_s=keep_alive_every_s)
        await bus.publish(bus.names.rollouts, make_sample(RUN), msg_id="m1")
        await _run_until(consumer, finished, timeout_s=60)
        await bus.close()
        return consumer.stats.counters

    counters = anyio.run(main)
    return seen, counters


def test_one_ticker_keeps_every_held_message_alive_past_ack_wait(nats_server):
    """Held 2.5 x ack_wait, the message is never redelivered while the event loop runs. A loop stalled
    past the keep-alive's margin is the one way it can be (issue 44: once in a full suite at load 12):
    the consumer then says so (``keep_alive_stalls``) and absorbs the redelivery (the test below shows
    both on a stall made on purpose), so the handler still runs once."""
    seen, counters = _held_past_ack_wait(nats_server, keep_alive_every_s=0.1)
    assert seen == [1] and counters["acked"] == 1
    assert counters["redelivered_in_hand"] == 0 or counters["keep_alive_stalls"] > 0


def test_without_keep_alive_a_message_held_past_ack_wait_is_redelivered_and_absorbed(nats_server):
    seen, counters = _held_past_ack_wait(nats_server, keep_alive_every_s=None, hold_s=60)
    assert seen == [1] and counters["redelivered_in_hand"] >= 1 and counters["acked"] == 1


def test_a_keep_alive_slower_than_ack_wait_is_tightened_so_long_work_is_never_redelivered(nats_server):
    """A role's in_progress_every_s (5 s by default) above a third of ack_wait (1 s here; the chaos runs
    use 2 s) would let the server redeliver work still in hand: each expiry one more delivery, until a
    good message is dead-lettered as a poison pill (the quick chaos run's unexplained letter)."""
    seen, counters = _held_past_ack_wait(nats_server, keep_alive_every_s=5.0)
    assert seen == [1] and counters["acked"] == 1
    assert counters["redelivered_in_hand"] == 0 or counters["keep_alive_stalls"] > 0


def test_a_loop_stalled_past_ack_wait_never_runs_work_in_hand_twice_nor_counts_it_toward_poison(nats_server):
    """Issue 44: a keep-alive can miss when the event loop does not run (a long GC pause, a blocking
    call, a process starved of CPU). Here the handler blocks the loop past ack_wait twice, so the
    server redelivers the message it holds twice. Before, each redelivery ran the handler again and
    was one more delivery toward poison_after (2 here: a third unsettled delivery is a poison pill).
    Now each is absorbed into the work in hand, which settles the message once, and each stall is said."""
    seen: list[int] = []

    async def main():
        bus = await _bus(nats_server.url, ack_wait_s=1.0, max_deliver=5, poison_after=2)
        done = anyio.Event()

        async def handle(sample: Sample, delivery):
            seen.append(delivery.num_delivered)
            if delivery.num_delivered > 1:  # the work run a second time: what must not happen
                done.set()
                return
            for redeliveries in (1, 2):
                time.sleep(1.6)  # the fault injected: the event loop does not run for 1.6 x ack_wait
                with anyio.move_on_after(60):  # until the server's redelivery has reached this consumer
                    while consumer.stats.counters["redelivered_in_hand"] < redeliveries and not done.is_set():
                        await anyio.sleep(0.02)
                if done.is_set():
                    return
            done.set()

        consumer = Consumer(bus, bus.consumer_def("verify"), stage="verify", decode=lambda d: decode(d, Sample),
                            handle=handle, concurrency=2, keep_alive_every_s=0.3)
        await bus.publish(bus.names.rollouts, make_sample(RUN), msg_id="m1")
        await _run_until(consumer, done, timeout_s=180)
        await bus.close()
        return consumer.stats.counters

    with capture_logs() as logs:
        counters = anyio.run(main)
    assert seen == [1]
    assert counters["redelivered_in_hand"] >= 2 and counters["acked"] == 1 and counters["faults"] == 0
    assert counters["dead_lettered"] == 0 and counters["poison_pills"] == 0
    client = BusClient(nats_server.url, RUN)
    assert client.decoded("DEAD", DeadLetter) == [] and client.stream_count("ROLLOUTS") == 0
    stalls = [e for e in logs if e["event"] == "keep_alive_stalled"]
    assert counters["keep_alive_stalls"] == len(stalls) and sum(e["stalled_s"] > 1.0 for e in stalls) >= 2
    absorbed = [e for e in logs if e["event"] == "redelivered_in_hand"]
    assert [e["deliveries"] for e in absorbed[:2]] == [2, 3] and absorbed[0]["log_level"] == "warning"


def test_a_pulled_message_is_kept_alive_from_when_its_pull_was_asked_for(nats_server):
    """The server's ack_wait starts when it delivers, and nats-py may hold a delivered message a while
    before its fetch returns (waiting for the rest of the batch: measured 0.2 s of a 1 s fetch, up to
    fetch_timeout_s). Its keep-alive is timed from the pull's start, so that wait never eats the margin."""
    brought: list[tuple[float, float]] = []  # (asked, returned) of the pull that brought the message
    alive_at: list[float] = []

    async def main():
        bus = await _bus(nats_server.url, ack_wait_s=30.0)
        real = bus.pull_subscription

        async def slow_subscription(cd, **kw):
            sub = await real(cd, **kw)
            fetch = sub.fetch

            async def slow(batch=1, timeout=5, **kw2):
                asked = time.monotonic()
                msgs = await fetch(batch, timeout=timeout, **kw2)
                if msgs:
                    await anyio.sleep(0.5)  # delivered, not yet returned: the loop runs on meanwhile
                    brought.append((asked, time.monotonic()))
                return msgs

            sub.fetch = slow
            return sub

        bus.pull_subscription = slow_subscription
        done = anyio.Event()

        async def handle(sample: Sample, delivery):
            alive_at.append(consumer._in_hand.release(delivery.stream_seq).alive_at)
            done.set()

        consumer = Consumer(bus, bus.consumer_def("verify"), stage="verify", decode=lambda d: decode(d, Sample),
                            handle=handle, concurrency=1, keep_alive_every_s=10.0)
        await bus.publish(bus.names.rollouts, make_sample(RUN), msg_id="m1")
        await _run_until(consumer, done)
        await bus.close()

    anyio.run(main)
    ((asked, returned),), (first_sign_of_life,) = brought, alive_at
    assert returned - asked >= 0.5
    assert asked - 1.0 < first_sign_of_life <= asked  # that pull's start, not its return 0.5 s later
