"""The consume loop's outcomes, in-process against a real nats-server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.actors.consume import Consumer, Nak
from rlvr.protocol import DeadLetter, RunNames, Sample, decode
from tests.actors.deadwatch import DeadLetterWatch
from tests.busclient import BusClient
from tests.factories import make_sample

RUN = "ct"


async def _bus(url: str, **bus) -> Bus:
    cfg = BusConfig(**{"ack_wait_s": 5.0, "nak_delay_s": 0.05, "fetch_timeout_s": 0.2, "max_deliver": 3, **bus})
    b = await Bus.connect(NatsConfig(url=url), cfg, RunNames(RUN), "test")
    await b.ensure_topology()
    return b


async def _run_until(consumer: Consumer, done: anyio.Event | Callable[[], Awaitable[object]],
                     timeout_s: float = 30) -> None:
    """Run ``consumer`` until ``done`` is set by its handlers (or, given a wait
    such as ``DeadLetterWatch.until``, until that returns; ``timeout_s`` at most),
    then stop it: the drain waits for every message in hand to be settled, so
    its counters are final when this returns."""
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(consumer.run, stop)
        with anyio.fail_after(timeout_s):
            await (done.wait() if isinstance(done, anyio.Event) else done())
        stop.set()


def test_a_message_that_keeps_failing_is_dead_lettered_as_a_poison_pill_by_max_deliver(nats_server):
    deliveries: list[int] = []

    async def main():
        bus = await _bus(nats_server.url)
        dead = DeadLetterWatch(bus)

        async def handle(sample: Sample, delivery) -> None:
            deliveries.append(delivery.num_delivered)
            raise RuntimeError("backend unavailable")

        consumer = Consumer(bus, bus.consumer_def("verify"), stage="verify",
                            decode=lambda d: decode(d, Sample), handle=handle, concurrency=2)
        await bus.publish(bus.names.rollouts, make_sample(RUN), msg_id="m1")
        # The letter stored in DEAD is the end of the story: the message is termed
        # (the drain waits for that), so no fourth delivery can follow it.
        await _run_until(consumer, lambda: dead.until(lambda w: w.stored >= 1))
        await bus.close()
        return consumer.stats.counters

    counters = anyio.run(main)
    assert deliveries == [1, 2, 3]
    assert counters["dead_lettered"] == 1 and counters["faults"] == 3 and counters["naked"] == 2
    assert counters["poison_pills"] == 1 and counters["dead_letter.poison"] == 1
    dead = BusClient(nats_server.url, RUN).decoded("DEAD", DeadLetter)
    assert len(dead) == 1 and "poison pill" in dead[0].reason and "backend unavailable" in dead[0].reason
    assert "max_deliver=3" in dead[0].reason and dead[0].kind == "poison"
    assert dead[0].error_type == "RuntimeError" and dead[0].delivery_count == 3


def test_nak_with_delay_redelivers_and_ack_removes(nats_server):
    seen: list[int] = []

    async def main():
        bus = await _bus(nats_server.url)
        done = anyio.Event()

        async def handle(sample: Sample, delivery):
            seen.append(delivery.num_delivered)
            if delivery.num_delivered == 1:
                return Nak(0.1, "not yet")
            done.set()
            return None  # ack

        consumer = Consumer(bus, bus.consumer_def("verify"), stage="verify",
                            decode=lambda d: decode(d, Sample), handle=handle, concurrency=1)
        await bus.publish(bus.names.rollouts, make_sample(RUN), msg_id="m1")
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            await tg.start(consumer.run, stop)
            with anyio.fail_after(30):
                await done.wait()
            stop.set()
        await bus.close()

    anyio.run(main)
    assert seen == [1, 2]
    assert BusClient(nats_server.url, RUN).stream_count("ROLLOUTS") == 0


def test_concurrency_bound_is_respected(nats_server):
    peak = 0

    async def main():
        nonlocal peak
        bus = await _bus(nats_server.url)
        active = 0
        finished = 0
        all_done = anyio.Event()
        release = anyio.Event()

        async def handle(sample: Sample, delivery):
            nonlocal active, finished, peak
            active += 1
            peak = max(peak, active)
            if peak == 3:
                release.set()
            await release.wait()
            active -= 1
            finished += 1
            if finished == 12:
                all_done.set()

        consumer = Consumer(bus, bus.consumer_def("verify"), stage="verify",
                            decode=lambda d: decode(d, Sample), handle=handle, concurrency=3)
        for k in range(12):
            await bus.publish(bus.names.rollouts, make_sample(RUN, k=k), msg_id=f"m{k}")
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            await tg.start(consumer.run, stop)
            with anyio.fail_after(30):
                await all_done.wait()
            stop.set()
        await bus.close()

    anyio.run(main)
    assert peak == 3


def test_a_message_whose_holders_keep_dying_is_dead_lettered_as_a_poison_pill_unread(nats_server):
    # A message that kills (or hangs) every replica holding it is redelivered
    # without ever being settled; after poison_after deliveries the next one is
    # dead-lettered before any handler runs, so it cannot crash-loop the role.
    handled: list[str] = []

    async def main():
        bus = await _bus(nats_server.url, ack_wait_s=0.5, max_deliver=5, poison_after=2)
        await bus.publish(bus.names.rollouts, make_sample(RUN), msg_id="killer")
        cd = bus.consumer_def("verify")
        sub = await bus.pull_subscription(cd)
        for _ in range(2):  # two holders that died with it: fetched, never settled
            with anyio.fail_after(10):
                (msg,) = await sub.fetch(1, timeout=5)
        await sub.unsubscribe()

        async def handle(sample: Sample, delivery) -> None:
            handled.append(sample.sample_id)

        dead = DeadLetterWatch(bus)
        consumer = Consumer(bus, cd, stage="verify", decode=lambda d: decode(d, Sample), handle=handle, concurrency=1)
        # Its third delivery is dead-lettered before any handler runs, and termed
        # (the drain waits for that): the handler can never see it after this.
        await _run_until(consumer, lambda: dead.until(lambda w: w.stored >= 1))
        await bus.close()
        return consumer.stats.counters, msg.metadata.num_delivered

    counters, last_seen = anyio.run(main)
    assert last_seen == 2 and handled == [] and counters["dead_letter.poison"] == 1
    (letter,) = BusClient(nats_server.url, RUN).decoded("DEAD", DeadLetter)
    assert letter.kind == "poison" and "never settled" in letter.reason and letter.delivery_count == 3


def test_a_transient_bus_fault_is_retried_in_place_and_never_makes_a_poison_pill(nats_server):
    """A full store or a leader election makes the handler's publish fail:
    not the message's fault. It is retried on the same delivery (kept alive),
    so it is never redelivered, never counted toward poison_after, and lands."""
    from nats.js.errors import ServiceUnavailableError

    attempts: list[int] = []

    async def main():
        bus = await _bus(nats_server.url)  # max_deliver 3: three failing deliveries would be a poison pill
        succeeded = anyio.Event()

        async def handle(sample: Sample, delivery) -> None:
            attempts.append(delivery.num_delivered)
            if len(attempts) <= 5:
                raise ServiceUnavailableError(code=503, description="insufficient resources")
            succeeded.set()  # the drain then waits for its ack

        consumer = Consumer(bus, bus.consumer_def("verify"), stage="verify",
                            decode=lambda d: decode(d, Sample), handle=handle, concurrency=2)
        await bus.publish(bus.names.rollouts, make_sample(RUN), msg_id="m1")
        # Five retries back off for about 5 s in all, past ack_wait (5 s): a
        # redelivery would show in ``attempts`` before the success, never after it.
        await _run_until(consumer, succeeded, timeout_s=60)
        await bus.close()
        return consumer.stats.counters

    counters = anyio.run(main)
    assert attempts == [1] * 6  # one delivery, five retries in place, then success
    assert counters["acked"] == 1 and counters["bus_retries"] == 5
    assert counters["faults"] == 0 and counters["poison_pills"] == 0 and counters["dead_lettered"] == 0
    assert BusClient(nats_server.url, RUN).decoded("DEAD", DeadLetter) == []


def test_pulls_are_batched_at_half_the_window(nats_server):
    """A pull per free slot would be a round trip per message; the loop
    waits for half the window (or a short linger) and pulls that many."""
    batches: list[int] = []

    async def main():
        bus = await _bus(nats_server.url)
        real = bus.pull_subscription

        async def counting_subscription(cd, **kw):
            sub = await real(cd, **kw)
            fetch = sub.fetch

            async def counted(batch=1, timeout=5, **kw2):
                msgs = await fetch(batch, timeout=timeout, **kw2)
                batches.append(len(msgs))
                return msgs

            sub.fetch = counted
            return sub

        bus.pull_subscription = counting_subscription

        handled, all_handled = [], anyio.Event()

        async def handle(sample: Sample, delivery):
            handled.append(sample.sample_id)
            if len(handled) == 96:
                all_handled.set()

        consumer = Consumer(bus, bus.consumer_def("verify"), stage="verify", decode=lambda d: decode(d, Sample),
                            handle=handle, concurrency=16)
        for i in range(96):
            await bus.publish(bus.names.rollouts, make_sample(RUN, k=i), msg_id=f"m{i}")
        await _run_until(consumer, all_handled)
        await bus.close()

    anyio.run(main)
    pulled = [n for n in batches if n]
    assert sum(pulled) == 96
    assert len(pulled) <= 96 // 8 + 2  # at least half the window (8) per pull, bar the tail


def _serve_copies(url: str, durable: str, subject: str, msg_type, meaning, copies: list, sentinel, served_of):
    """Publish ``copies`` then ``sentinel`` under distinct Nats-Msg-Ids (so the
    server stores every copy, as past a duplicate window it lost), serve them
    one at a time with ``meaning``; returns what was served (``served_of`` of
    each), the consumer's counters and the kinds of the dead letters."""
    served: list = []

    async def main():
        bus = await _bus(url)
        sentinel_seen = anyio.Event()

        async def handle(obj, delivery):
            if obj.task_id == sentinel.task_id:
                sentinel_seen.set()  # one at a time: every copy before it is settled
                return
            served.append(served_of(obj))

        consumer = Consumer(bus, bus.consumer_def(durable), stage=durable, decode=lambda d: decode(d, msg_type),
                            handle=handle, concurrency=1, meaning=meaning)
        for i, m in enumerate([*copies, sentinel]):
            await bus.publish(getattr(bus.names, subject), m, msg_id=f"copy{i}")
        await _run_until(consumer, sentinel_seen)
        await bus.close()
        return consumer.stats.counters

    counters = anyio.run(main)
    dead = BusClient(url, RUN).decoded("DEAD", DeadLetter)
    return served, counters, [d.kind for d in dead]


def test_a_task_reissued_with_a_new_timestamp_is_a_duplicate_not_a_conflict(nats_server):
    """A learner restarted from its checkpoint issues its last tasks again: same
    id and content, a new created_at and policy version. Past a duplicate window
    the server lost (a SIGKILL), the copy is stored; the rollout serves the first
    copy only, and the other, with another prompt, is still a conflict."""
    import msgspec

    from rlvr.protocol import Task
    from rlvr.protocol.tasks import task_meaning
    from tests.factories import make_task

    first = make_task(RUN, k=7)
    reissued = msgspec.structs.replace(first, created_at=first.created_at + 60, policy_version=3)
    other = msgspec.structs.replace(first, prompt="9+9=")
    served, counters, dead = _serve_copies(nats_server.url, "rollout", "tasks", Task, task_meaning,
                                           [first, reissued, other], make_task(RUN, k=8), lambda t: t.prompt)
    assert served == ["2+3="]
    assert counters["duplicates"] == 1 and counters["dead_letter.conflict"] == 1
    assert dead == ["conflict"]


def test_a_regenerated_sample_is_a_duplicate_not_a_conflict(nats_server):
    """A rollout that died after publishing a group, before acking its task, has
    the task generated again: the same sample ids with other completions. Past a
    duplicate window the server lost, the copies are stored; the verifier serves
    the first copy of the slot only, and a copy with another answer key under the
    same id is still a conflict."""
    import msgspec

    from rlvr.protocol import Completion, Timings
    from rlvr.protocol.samples import sample_meaning

    first = make_sample(RUN, k=7, text="5")
    regenerated = msgspec.structs.replace(
        first, completion=Completion(ids=[9, 9, 9], logprobs=[-1.0, -2.0, -3.0]), text="7",
        finish_reason="length", policy_version=4, policy_version_max=5, replica="other",
        timings=Timings(generate_s=1.5),
    )
    other_gold = make_sample(RUN, k=7, gold="9")
    served, counters, dead = _serve_copies(nats_server.url, "verify", "rollouts", Sample, sample_meaning,
                                           [first, regenerated, other_gold], make_sample(RUN, k=8),
                                           lambda s: s.text)
    assert served == ["5"]
    assert counters["duplicates"] == 1 and counters["dead_letter.conflict"] == 1
    assert dead == ["conflict"]


def test_a_task_group_s_failure_is_named_by_its_causes_not_its_wrapper():
    """A dead letter read "ExceptionGroup: unhandled errors in a TaskGroup (4 sub-exceptions)" (issue 33)."""
    from rlvr.actors.consume import error_text

    group = ExceptionGroup("unhandled errors in a TaskGroup", [
        ValueError("model has no chat template"), ValueError("model has no chat template"),
        ExceptionGroup("inner", [KeyError("tools")]), RuntimeError("engine died")])
    text = error_text(group)
    assert "ValueError: model has no chat template (x2)" in text
    assert "KeyError: 'tools'" in text and "RuntimeError: engine died" in text
    assert "TaskGroup" not in text
    assert error_text(OSError("disk")) == "OSError: disk"
