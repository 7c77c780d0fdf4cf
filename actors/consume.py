"""Pull from a durable consumer with bounded concurrency; one outcome per message.

Every message ends in exactly one of:

- ``Ack``: done (the handler's default when it returns ``None``);
- ``Nak(delay)``: not now, redeliver later (nothing was lost);
- ``Term(reason)``: never redeliver; the message is dead-lettered first, with the reason;
- ``in_progress`` is not an outcome but a keep-alive a handler sends during long work.

Faults (exceptions from the handler) nak with a delay, and on the last
allowed delivery (``max_deliver``) dead-letter the message with the error and
term it, so a poison message is counted once and never silently vanishes. A
payload that does not decode is dead-lettered at once: retrying cannot fix it.

Drain: when ``stop`` is set the loop stops pulling (it notices within one
``fetch_timeout_s``); handlers in hand get ``drain_timeout_s`` to finish and
are then cancelled, and their messages are nak'ed (shielded) for immediate
redelivery elsewhere.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio
import msgspec
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from opentelemetry import context as otel_context

from rlvr.actors.bus import Bus
from rlvr.actors.logs import bind_message, get_logger
from rlvr.actors.tracing import extract_context, trace_id_hex
from rlvr.protocol import MessageDecodeError
from rlvr.protocol.subjects import ConsumerDef

T = TypeVar("T")
log = get_logger("rlvr.consume")


class Ack(msgspec.Struct, frozen=True):
    pass


class Nak(msgspec.Struct, frozen=True):
    delay_s: float = 0.0
    reason: str = ""


class Term(msgspec.Struct, frozen=True):
    reason: str
    error_type: str = "Term"


class Hold(msgspec.Struct, frozen=True):
    """The handler took custody: it will ack or nak the message itself later
    (the learner acks samples only once a checkpoint holds their step)."""


Outcome = Ack | Nak | Term | Hold


class ActorFatalError(RuntimeError):
    """Raised by a handler when the actor itself cannot go on (its engine died).

    The message in hand is nak'ed for another replica, and the error ends the
    actor with a non-zero exit instead of failing every message after it.
    """


class Delivery:
    """What a handler knows about the message it holds."""

    def __init__(self, msg: Msg) -> None:
        self.msg = msg
        meta = msg.metadata
        self.num_delivered: int = meta.num_delivered
        self.stream_seq: int = meta.sequence.stream
        self.headers: dict[str, str] = dict(msg.headers or {})
        self.received_at = time.time()

    async def in_progress(self) -> None:
        await self.msg.in_progress()

    async def keep_alive(self, every_s: float) -> None:
        """Send in_progress every ``every_s`` until cancelled (run in a task group)."""
        while True:
            await anyio.sleep(every_s)
            await self.msg.in_progress()


class ConsumerStats:
    def __init__(self) -> None:
        self.counters: dict[str, float] = {
            "received": 0,
            "acked": 0,
            "naked": 0,
            "dead_lettered": 0,
            "faults": 0,
        }
        self.in_flight = 0


Handler = Callable[[T, Delivery], Awaitable["Outcome | None"]]


class Consumer(Generic[T]):
    def __init__(
        self,
        bus: Bus,
        cd: ConsumerDef,
        *,
        stage: str,
        decode: Callable[[bytes], T],
        handle: Handler[T],
        concurrency: int,
        task_id_of: Callable[[T], str | None] = lambda _: None,
        start_seq: int | None = None,
    ) -> None:
        self.bus = bus
        self.cd = cd
        self.stage = stage
        self.decode = decode
        self.handle = handle
        self.concurrency = concurrency
        self.task_id_of = task_id_of
        self.start_seq = start_seq
        self.stats = ConsumerStats()

    async def run(self, stop: anyio.Event, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        sub = await self.bus.pull_subscription(self.cd, start_seq=self.start_seq)
        slots = anyio.Semaphore(self.concurrency)
        task_status.started()
        try:
            # The drain deadline is set on this scope once pulling stops: the
            # task group then waits for the handlers in hand, at most that long.
            with anyio.CancelScope() as drain_scope:
                async with anyio.create_task_group() as handlers:
                    while await _slot_or_stop(slots, stop):
                        await self._pull_once(sub, slots, handlers)
                    drain_scope.deadline = anyio.current_time() + self.bus.cfg.drain_timeout_s
            if drain_scope.cancelled_caught:
                log.warning("drain_timeout", naked=self.stats.in_flight)
        finally:
            with anyio.CancelScope(shield=True):
                await sub.unsubscribe()

    async def _pull_once(self, sub, slots: anyio.Semaphore, handlers: anyio.abc.TaskGroup) -> None:
        # One slot is already ours (``_slot_or_stop``); take every other free
        # one, so we never pull messages we cannot work on at once (they would
        # age in our hands past ack_wait).
        taken = 1
        while slots.value > 0:
            slots.acquire_nowait()
            taken += 1
        try:
            msgs = await sub.fetch(batch=taken, timeout=self.bus.cfg.fetch_timeout_s)
        except (NatsTimeoutError, asyncio.TimeoutError):
            # nats-py raises its own TimeoutError for batch=1 and asyncio's
            # for batch>1 when nothing arrived: either way, no messages.
            msgs = []
        except BaseException:
            for _ in range(taken):
                slots.release()
            raise
        for _ in range(taken - len(msgs)):
            slots.release()
        for m in msgs:
            handlers.start_soon(self._one, m, slots)

    async def _one(self, msg: Msg, slots: anyio.Semaphore) -> None:
        self.stats.in_flight += 1
        self.stats.counters["received"] += 1
        settled = False
        try:
            delivery = Delivery(msg)
            try:
                obj = self.decode(msg.data)
            except MessageDecodeError as e:
                await self._dead(msg, e.reason, f"MessageDecodeError:{e.kind}")
                settled = True
                return
            token = otel_context.attach(extract_context(delivery.headers))
            try:
                with bind_message(task_id=self.task_id_of(obj), trace_id=trace_id_hex()):
                    try:
                        outcome = await self.handle(obj, delivery) or Ack()
                    except ActorFatalError:
                        raise  # the finally below naks the message
                    except Exception as e:  # a fault: infrastructure, engine, bug
                        self.stats.counters["faults"] += 1
                        outcome = self._fault_outcome(delivery, e)
                    await self._settle(msg, outcome)
                    settled = True
            finally:
                otel_context.detach(token)
        finally:
            if not settled:
                # Cancelled (drain timeout or shutdown): give the message back now.
                with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                    await msg.nak()
                    self.stats.counters["naked"] += 1
                    log.info("naked_on_stop", stream_seq=_seq(msg))
            self.stats.in_flight -= 1
            slots.release()

    def _fault_outcome(self, delivery: Delivery, e: Exception) -> Outcome:
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]  # a task group's wrapper says nothing; name the cause
        reason = f"{type(e).__name__}: {e}"
        if delivery.num_delivered >= self.cd.max_deliver:
            log.error("fault_final", error=reason, deliveries=delivery.num_delivered, exc_info=e)
            return Term(f"max_deliver ({self.cd.max_deliver}) reached; last error: {reason}", type(e).__name__)
        log.warning("fault_retry", error=reason, deliveries=delivery.num_delivered, exc_info=e)
        return Nak(self.bus.cfg.nak_delay_s * delivery.num_delivered, reason)

    async def _settle(self, msg: Msg, outcome: Outcome) -> None:
        match outcome:
            case Ack():
                await msg.ack()
                self.stats.counters["acked"] += 1
            case Nak(delay_s=delay):
                await msg.nak(delay=delay or None)
                self.stats.counters["naked"] += 1
            case Term(reason=reason, error_type=error_type):
                await self._dead(msg, reason, error_type)
            case Hold():
                pass

    async def _dead(self, msg: Msg, reason: str, error_type: str) -> None:
        await self.bus.dead_letter(self.stage, msg, reason, error_type)
        await msg.term()
        self.stats.counters["dead_lettered"] += 1


async def _slot_or_stop(slots: anyio.Semaphore, stop: anyio.Event) -> bool:
    """Take a free slot, or return False as soon as ``stop`` is set."""
    acquired = False
    async with anyio.create_task_group() as tg:

        async def take() -> None:
            nonlocal acquired
            await slots.acquire()
            acquired = True
            tg.cancel_scope.cancel()

        async def watch() -> None:
            await stop.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(take)
        tg.start_soon(watch)
    if acquired and stop.is_set():
        slots.release()
        return False
    return acquired


def _seq(msg: Msg) -> int | None:
    try:
        return msg.metadata.sequence.stream
    except Exception:  # not a JetStream message
        return None
