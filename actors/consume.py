"""Pull from a durable consumer with bounded concurrency; one outcome per message.

Every message ends in exactly one of:

- ``Ack``: done (the handler's default when it returns ``None``);
- ``Nak(delay)``: not now, redeliver later (nothing was lost);
- ``Term(reason)``: never redeliver; the message is dead-lettered first, with the reason;
- ``Hold``: the handler keeps custody; the message stays in the consumer's
  hands, kept alive, until the holder calls ``release(stream_seq)`` (the
  learner acks a sample once a checkpoint records its fate);
- ``in_progress`` is not an outcome but a keep-alive: the consumer's one ticker sends it for
  every message in hand or held past ``keep_alive_every_s`` (the outcome types live in
  ``delivery.py``; the messages in hand, the ticker, and what a stalled event loop costs, in
  ``in_hand.py``). Like every ack and nak it is never fatal: a failure is counted.

Messages are untrusted. Before a handler sees one, ``rlvr.actors.admission``
(pure, testable without a server) checks that it does

1. not look like a poison pill: a message delivered more than ``poison_after``
   times without being settled (its holder died or hung with it) is
   dead-lettered unread, so it can never crash-loop a role;
2. decode (codec.py) and pass its family's checks (``validate``, by default
   ``rlvr.protocol.validate.check_message``): finite numbers, lengths that
   agree, ids in range, bounded sizes;
3. not reuse the id of a message this consumer has seen with other content
   (unless ``check_copies`` is False: the learner's custody judges copies)
   (a task id or sample id published again past the duplicate window, or
   under another ``Nats-Msg-Id``): the first copy is the one served. Where
   the consumer is given a ``meaning`` (the rollout's tasks: ``task_meaning``;
   the verifier's samples: ``sample_meaning``), a copy that means the same
   under another stream sequence (a task re-issued, a group generated again)
   is a duplicate: acked and counted (``duplicates``), never served twice.

A message that fails is dead-lettered at once with its reason (retrying
cannot fix it). Faults (exceptions from the handler) nak with a delay, and on
the ``poison_after``-th delivery dead-letter the message as a poison pill.
A transient bus fault (``is_transient_bus_fault``: a publish that timed out,
a full store, no stream leader) is not the message's fault: the handler is
retried in place, the message kept alive, so an outage never turns good
messages into poison pills. A pull that fails that way is retried too, for
at most ``bus.topology_wait_s``, then the consumer fails naming itself. Both
retry through ``rlvr.actors.retry``, the one retry policy. A pull that fails
because the durable itself was deleted is repaired without an operator: the
topology's owner (the learner) recreates its own durable where it was
reading, any other replica waits for the owner's repair (``_durable_gone``).

Dead-lettering never kills the actor, and neither does an ack, a nak or a
term that fails (``rlvr.actors.settle``).

Drain: when ``stop`` is set the loop stops pulling (it notices within one
``fetch_timeout_s``); handlers in hand get ``drain_timeout_s`` to finish and
are then cancelled, and their messages are nak'ed (shielded) for immediate
redelivery elsewhere.

Cost per message is what bounds a hop's rate (bench/bus_hop.py), so:

- pulls are batched: the loop fetches once at least half the window
  (``concurrency``) is free, or after a short linger when less is; after a
  pull that came back short (the stream running dry) it lingers too, so a
  trickle is pulled in handfuls, never one message per pull request (each
  pull is a round trip and server work);
- ``concurrency`` long-lived handler tasks (lanes) take the pulled messages,
  so no task is made per message, and nothing else is either: a single
  ticker per consumer (``keep_alive_every_s``) sends ``in_progress`` for every
  message held past the interval, instead of a keep-alive task per message;
- the message's trace context is extracted once into ``Delivery.trace_context``
  and handlers start their span from it; nothing is attached per message;
- messages are admitted as they are pulled (``_take``), and a consumer given a
  ``forward`` (the verifier: a verdict known at once) asks it for each one
  there and then: a ``Forward`` is encoded at once and published with the rest
  of its pull, and each input is acked once its own output is stored (one
  PubAck timer for the lot); None sends the message to a lane and ``handle``,
  a ``Term`` dead-letters it, an exception is a fault of that message alone.
  An output whose publish fails is published again through ``_handle``'s
  retry, the input kept alive meanwhile. ``forward`` runs in the pull loop:
  it must be quick and do no I/O;
- pull subscriptions take messages already delivered without a task each
  (``rlvr.actors.nats_fetch``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Generic, NamedTuple, TypeVar

import anyio
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import NotFoundError

from rlvr.actors.error_text import error_text  # noqa: F401 - re-exported
from rlvr.actors.admission import DEAD_KINDS, Admission, MessageRefused, MessageRepublished
from rlvr.actors.bus import Bus
from rlvr.actors.bus_faults import is_transient_bus_fault
from rlvr.actors.delivery import (Ack, ActorFatalError, ConsumerStats, ConsumerUnavailableError, Delivery, Forward,
                                  Hold, Nak, Outcome, Term)
from rlvr.actors.in_hand import Entry, InHand
from rlvr.actors.logs import bind_message, get_logger
from rlvr.actors.retry import FOREVER, call_retrying
from rlvr.actors.settle import dead_letter_and_term, safely, stream_seq
from rlvr.actors.topology import TopologyLostError, create_consumer, lost_message
from rlvr.actors.tracing import passing_on, trace_id_of
from rlvr.protocol.codec import encode
from rlvr.protocol.subjects import ConsumerDef
from rlvr.protocol.validate import check_message

T = TypeVar("T")
log = get_logger("rlvr.consume")


# How long the pull loop waits for half the window to free up before it
# pulls for the slots that are free (bounds the latency a batched pull adds).
_LINGER_S = 0.02
Handler = Callable[[T, Delivery], Awaitable["Outcome | None"]]
Forwarder = Callable[[T, Delivery], "Forward | Term | None"]


class _Out(NamedTuple):
    """A ``Forward``, encoded: what ``Bus.send`` takes."""

    subject: str
    data: bytes
    headers: dict[str, str]


class _Job:
    """One pulled message on its way to an outcome: admitted (``obj``) or
    settled already by admission (``preset``: a refusal's ``Term``, a
    duplicate's ``Ack``, a ``forward`` that failed). ``entry.msg`` is the
    delivery to settle: the newest, should the server redeliver it meanwhile."""

    __slots__ = ("delivery", "entry", "key", "obj", "preset")

    def __init__(self, key: int | None, entry: Entry) -> None:
        self.key, self.entry = key, entry
        self.delivery: Delivery | None = None
        self.obj: object = None
        self.preset: Outcome | None = None


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
        validate: Callable[[T], None] = check_message,
        poison_after: int | None = None,
        keep_alive_every_s: float | None = None,
        meaning: Callable[[T], bytes] | None = None,
        forward: Forwarder[T] | None = None,
        check_copies: bool = True,
    ) -> None:
        self.bus = bus
        self.cd = cd
        self.stage = stage
        self.handle = handle
        self.concurrency = concurrency
        self.task_id_of = task_id_of
        self.start_seq = start_seq
        self.forward = forward
        self.stats = ConsumerStats()
        # Poison threshold: the last allowed delivery must always settle the
        # message, or a message that keeps killing its holder stays stuck.
        n = bus.cfg.poison_after if poison_after is None else poison_after
        self.poison_after = max(1, min(n, cd.max_deliver))
        self.admission = Admission(decode, unsettled_limit=max(1, min(n, cd.max_deliver - 1)), validate=validate,
                                   meaning=meaning, check_copies=check_copies)
        self._backoff_max_s = max(0.1, min(30.0, bus.cfg.ack_wait_s / 3))
        # The window: ``_free`` slots of ``concurrency``; ``_room`` is set
        # whenever one frees up (or stop is set), to wake the pull loop.
        self._free = concurrency
        self._room = anyio.Event()
        self._pulled_short = False  # the last pull came back with less than half the window
        # At most a third of ack_wait, whatever the role asks: a slower keep-alive lets work still in hand be
        # redelivered, its delivery count climbing toward poison_after with nobody at fault.
        self.keep_alive_every_s, most = keep_alive_every_s, bus.cfg.ack_wait_s / 3
        if keep_alive_every_s and keep_alive_every_s > most:
            self.keep_alive_every_s = most
            log.warning("keep_alive_tightened", stage=stage, asked_s=keep_alive_every_s, every_s=round(most, 3),
                        ack_wait_s=bus.cfg.ack_wait_s)
        # Messages in hand, being handled or held (``Hold``) until ``release``, kept alive by the ticker.
        self._in_hand = InHand(self.stats.counters, stage=stage, ack_wait_s=bus.cfg.ack_wait_s)
        # Pulled messages on their way to a lane; None tells a lane to stop.
        self._inbox: asyncio.Queue[_Job | None] = asyncio.Queue()
        self._lanes: anyio.abc.TaskGroup | None = None  # where batches of forwards run
        self._max_seq = 0  # the highest stream sequence delivered: where a recreated durable resumes
        self._gone_since: float | None = None  # when this consumer's durable was found deleted

    async def run(self, stop: anyio.Event, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        sub = await self.bus.pull_subscription(self.cd, start_seq=self.start_seq)
        task_status.started()
        try:
            # The ticker and the stop watcher outlive the handlers: messages
            # being drained are still kept alive.
            async with anyio.create_task_group() as chores:
                chores.start_soon(self._wake_on, stop)
                if self.keep_alive_every_s:
                    chores.start_soon(self._in_hand.keep_alive, self.keep_alive_every_s)
                # The drain deadline is set on this scope once pulling stops: the
                # task group then waits for the handlers in hand, at most that long.
                with anyio.CancelScope() as drain_scope:
                    async with anyio.create_task_group() as lanes:
                        self._lanes = lanes
                        for _ in range(self.concurrency):
                            lanes.start_soon(self._lane)
                        while await self._room_to_pull(stop):
                            await self._pull_once(sub)
                        drain_scope.deadline = anyio.current_time() + self.bus.cfg.drain_timeout_s
                        for _ in range(self.concurrency):
                            self._inbox.put_nowait(None)  # each lane ends once the messages before it are done
                chores.cancel_scope.cancel()
            if drain_scope.cancelled_caught:
                log.warning("drain_timeout", naked=self.stats.in_flight)
        finally:
            with anyio.CancelScope(shield=True):
                await self._give_back_untaken()
                await sub.unsubscribe()

    async def _lane(self) -> None:
        """One of ``concurrency`` long-lived handler tasks: it takes pulled
        messages one at a time (a task per message would cost a task handle,
        a cancel scope and an event each)."""
        while (job := await self._inbox.get()) is not None:
            await self._one(job)

    async def _give_back_untaken(self) -> None:
        """Nak the messages pulled but never taken by a lane (a drain cut short)."""
        while not self._inbox.empty():
            job = self._inbox.get_nowait()
            if job is not None:
                await self._abandon(job)

    async def _give_back(self, msg: Msg) -> None:
        """Nak a message at stop, for immediate redelivery elsewhere (at most 2 s)."""
        with anyio.move_on_after(2):
            self.admission.given_back(stream_seq(msg))
            if await self._safely(msg.nak, "nak"):
                self.stats.counters["naked"] += 1
            log.info("naked_on_stop", stream_seq=stream_seq(msg))

    async def _wake_on(self, stop: anyio.Event) -> None:
        await stop.wait()
        self._room.set()

    async def _room_to_pull(self, stop: anyio.Event) -> bool:
        """Wait until a pull is worth it: half the window free, or some of it
        free for ``_LINGER_S`` (so slow handlers never leave a slot idle for
        long). False once ``stop`` is set."""
        half = max(1, self.concurrency // 2)
        if self._pulled_short and not stop.is_set():
            # The last pull found fewer messages than it had room for: the stream
            # is running dry, so let some arrive rather than pull them one by one.
            self._pulled_short = False
            with anyio.move_on_after(_LINGER_S):
                await stop.wait()
        deadline = math.inf
        while not stop.is_set():
            if self._free >= half:
                return True
            now = anyio.current_time()
            if self._free > 0:
                if deadline == math.inf:
                    deadline = now + _LINGER_S
                elif now >= deadline:
                    return True
            self._room = anyio.Event()
            with anyio.move_on_after(deadline - now):
                await self._room.wait()
        return False

    def _release(self) -> None:
        self._free += 1
        self._room.set()

    async def _pull_once(self, sub) -> None:
        # Take every free slot, so we never pull messages we cannot work on
        # at once (they would age in our hands past ack_wait).
        taken, self._free = self._free, 0
        asked_at = time.monotonic()  # the server's ack_wait starts later, when it delivers
        try:
            msgs = await self._fetch(sub, taken)
        except BaseException:
            self._free += taken
            raise
        self._free += taken - len(msgs)
        self._pulled_short = 0 < len(msgs) < max(1, self.concurrency // 2)
        forwards: list[tuple[_Job, _Out]] = []
        for m in msgs:
            if (job := self._take(m, asked_at)) is None:  # a redelivery of a message in hand
                self._release()
                continue
            if self.forward is not None and job.preset is None and (out := self._forward_of(job)) is not None:
                forwards.append((job, out))
            else:
                self._inbox.put_nowait(job)
        if forwards:
            assert self._lanes is not None
            self._lanes.start_soon(self._forward_all, forwards)

    def _take(self, msg: Msg, asked_at: float) -> _Job | None:
        """Count ``msg`` in hand, keep it alive from now on, and admit it; None when it is
        a redelivery of a message still in hand (absorbed there: ``InHand.take``)."""
        key = stream_seq(msg)
        if key is not None and key > self._max_seq:
            self._max_seq = key
        if (entry := self._in_hand.take(key, msg, asked_at)) is None:
            return None
        self.stats.in_flight += 1
        self.stats.counters["received"] += 1
        job = _Job(key, entry)
        try:
            job.delivery = delivery = Delivery(msg)
            job.obj = self.admission.admit(msg.data, delivery.headers, num_delivered=delivery.num_delivered,
                                           stream_seq=delivery.stream_seq)
        except MessageRefused as r:
            job.preset = Term(r.reason, r.error_type, kind=r.kind)
        except MessageRepublished as r:
            # The same message published again (a feeder re-issuing after a restart,
            # past a duplicate window the server lost): the first copy is served.
            log.info("duplicate_dropped", msg_id=r.msg_id, stream_seq=key)
            self.stats.counters["duplicates"] += 1
            job.preset = Ack()
        except BaseException:  # not a JetStream message: a bug, not the message's fault
            self._in_hand.done(key, entry)
            self.stats.in_flight -= 1
            raise
        return job

    def _forward_of(self, job: _Job) -> _Out | None:
        """``forward``'s answer for an admitted message, encoded at once (the
        decoded message is dropped while it is still in the cache: a pull of
        large samples would not fit). A ``Term`` or an exception (a fault of
        this delivery) becomes the job's outcome, and None sends the message
        to a lane (``handle``)."""
        assert self.forward is not None and job.delivery is not None
        try:
            with passing_on(job.delivery.headers.get("traceparent")):
                out = self.forward(job.obj, job.delivery)  # type: ignore[arg-type]
            if out is None or isinstance(out, Term):
                job.preset = out
                return None
            encoded = _Out(out.subject, encode(out.message), out.headers)  # type: ignore[arg-type]
        except Exception as e:
            self.stats.counters["faults"] += 1
            job.preset = self._fault_outcome(job.delivery, e)
            return None
        job.obj = None
        return encoded

    async def _forward_all(self, items: list[tuple[_Job, _Out]]) -> None:
        """Publish every forward of a pull at once, then ack each input once its
        output's PubAck is back (one timer for the lot). An output that failed
        is published again through ``_handle``: a transient bus fault is retried
        in place, anything else is a fault of that message alone."""
        settled = 0
        try:
            futures: list = []
            for _, out in items:
                try:
                    futures.append(await self.bus.send(*out))
                except Exception as e:
                    futures.append(e)
            sent = [f for f in futures if not isinstance(f, Exception)]
            acks = iter(await self.bus.pub_acks(sent))
            for (job, out), f in zip(items, futures):
                result = f if isinstance(f, Exception) else next(acks)
                if isinstance(result, Exception):
                    outcome = await self._handle(job.delivery, lambda out=out: self._publish_again(out))  # type: ignore[arg-type]
                else:
                    outcome = Ack()
                await self._settle(job.entry.msg, outcome)
                self._finish(job, outcome)
                settled += 1
        finally:
            for job, _ in items[settled:]:
                await self._abandon(job)

    async def _publish_again(self, out: _Out) -> None:
        (result,) = await self.bus.pub_acks([await self.bus.send(*out)])
        if isinstance(result, Exception):
            raise result

    async def _fetch(self, sub, batch: int) -> list[Msg]:
        """Up to ``batch`` messages. A pull the server could not answer (a leader
        election, a partition, a full store, a consumer being recreated) is
        pulled again, saying so, for at most ``bus.topology_wait_s``; then the
        consumer fails, naming itself."""

        def count(_: BaseException) -> None:
            self.stats.counters["pull_failures"] += 1

        async def pull() -> list[Msg]:
            try:
                return await sub.fetch(batch=batch, timeout=self.bus.cfg.fetch_timeout_s)
            except (NatsTimeoutError, asyncio.TimeoutError):
                # nats-py raises its own TimeoutError for batch=1 and asyncio's
                # for batch>1 when nothing arrived: either way, no messages.
                return []
            except Exception as e:
                if is_transient_bus_fault(e):
                    await self._durable_gone()  # TopologyLostError ends the retries
                raise

        wait_s = self.bus.cfg.topology_wait_s
        try:
            return await call_retrying("pull", pull, until=wait_s, wait_initial=0.5, wait_max=self._backoff_max_s,
                                       on_retry=count, consumer=self.cd.durable, stream=self.cd.stream)
        except Exception as e:
            if not is_transient_bus_fault(e):
                raise
            self.stats.counters["pull_failures"] += 1
            gone = (f"consumer {self.cd.durable!r} on stream {self.cd.stream} was deleted and its owner (the "
                    f"learner) did not recreate it within {wait_s:g}s (bus.topology_wait_s): start the learner, "
                    "or run `rlvr-actor init --config <this run's config>`, then restart this role"
                    if self._gone_since is not None else
                    f"pulling from consumer {self.cd.durable!r} on stream {self.cd.stream} has failed for about "
                    f"{wait_s:g}s (bus.topology_wait_s)")
            raise ConsumerUnavailableError(f"{gone}; last error: {type(e).__name__}: {e}") from e

    async def _durable_gone(self) -> None:
        """A pull the server could not answer: is this consumer's durable gone (deleted by hand,
        or with its stream)? Its owner (the learner) recreates it where it was reading: from the
        oldest message it holds, or the first it has not seen (what this process settled below
        that comes again and is recognised). Any other replica waits for the owner's repair
        (``Bus.keep_topology``), saying so once, until ``bus.topology_wait_s`` (``_fetch``). A
        stream that is gone, or shorter than what was read from it, was deleted:
        ``TopologyLostError`` names the loss."""
        try:
            await self.bus.js.consumer_info(self.cd.stream, self.cd.durable)
            self._gone_since = None
            return  # still there: an election, a partition
        except NotFoundError:
            pass
        except Exception:  # noqa: BLE001 (the server cannot say now: the next failed pull asks again)
            return
        if self._gone_since is None:
            self._gone_since = time.monotonic()
            log.warning("consumer_deleted", stream=self.cd.stream, durable=self.cd.durable,
                        action="recreating it" if self.bus.owns_topology else "waiting for its owner to recreate it")
        if not self.bus.owns_topology:
            return
        held = self._in_hand.sequences()
        resume = min(held) if held else (self._max_seq + 1 if self._max_seq else self.start_seq)
        try:
            info = await self.bus.js.stream_info(self.cd.stream)
        except NotFoundError:
            raise TopologyLostError(lost_message(self.cd, resume or 1, None, self._max_seq)) from None
        if info.state.last_seq < self._max_seq:
            raise TopologyLostError(lost_message(self.cd, resume or 1, info.state.last_seq, self._max_seq))
        await create_consumer(self.bus, self.cd, resume)
        self.stats.counters["consumer_recreated"] += 1
        self._gone_since = None
        log.warning("consumer_recreated", stream=self.cd.stream, durable=self.cd.durable, resume_seq=resume)

    async def _handle(self, delivery: Delivery, work: Callable[[], Awaitable[Outcome | None]]) -> Outcome:
        """The outcome of ``work`` (the handler, or a forward's publish). A transient bus fault (a publish that timed
        out, a full store, no stream leader) is not the message's fault: it is
        retried in place, for as long as it lasts, the message kept alive with
        ``in_progress``, so its delivery count never turns it into a poison
        pill. Any other exception is a fault of this delivery (``_fault_outcome``)."""

        async def keep_alive(_: BaseException) -> None:
            self.stats.counters["bus_retries"] += 1
            await self._safely(delivery.msg.in_progress, "in_progress")

        attempts = 0

        async def attempt() -> Outcome:
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                await self._safely(delivery.msg.in_progress, "in_progress")
            return await work() or Ack()

        try:
            return await call_retrying("handle", attempt, until=FOREVER, wait_max=self._backoff_max_s,
                                       on_retry=keep_alive, stream_seq=delivery.stream_seq)
        except ActorFatalError:
            raise
        except Exception as e:  # a fault: infrastructure, engine, bug
            self.stats.counters["faults"] += 1
            return self._fault_outcome(delivery, e)

    async def _one(self, job: _Job) -> None:
        outcome: Outcome | None = None
        try:
            if job.preset is not None:  # settled by admission or by ``forward``
                await self._settle(job.entry.msg, job.preset)
                outcome = job.preset
                return
            obj, delivery = job.obj, job.delivery
            assert delivery is not None
            traceparent = delivery.headers.get("traceparent")
            with passing_on(traceparent), bind_message(task_id=self._task_id(obj), trace_id=trace_id_of(traceparent)):
                # ActorFatalError: the finally below naks
                handled = await self._handle(delivery, lambda: self.handle(obj, delivery))  # type: ignore[arg-type]
                await self._settle(job.entry.msg, handled)
                outcome = handled
        finally:
            if outcome is None:
                # Cancelled (drain timeout or shutdown): give the message back now.
                await self._abandon(job)
            else:
                self._finish(job, outcome)

    def _finish(self, job: _Job, outcome: Outcome) -> None:
        """``job`` is settled (or held, ``Hold``): its slot is free."""
        self._in_hand.done(job.key, job.entry, held=isinstance(outcome, Hold))
        self.stats.in_flight -= 1
        self._release()

    async def _abandon(self, job: _Job) -> None:
        """Give ``job``'s message back now, for redelivery elsewhere (a stop, a drain cut short)."""
        self._in_hand.done(job.key, job.entry)
        with anyio.CancelScope(shield=True):
            await self._give_back(job.entry.msg)
        self.stats.in_flight -= 1
        self._release()

    async def release(self, stream_seq: int, outcome: Ack | Nak | Term | None = None) -> None:
        """Settle a message its handler held (``Hold``): ack it (or nak it, or dead-letter it) now.
        Never fatal, like every settle; a sequence not held (released already,
        or never held) is left alone."""
        entry = self._in_hand.release(stream_seq)
        if entry is not None:
            await self._settle(entry.msg, outcome or Ack())

    @property
    def held(self) -> int:
        """Messages held by their handlers (``Hold``), not being handled now."""
        return max(0, len(self._in_hand) - self.stats.in_flight)

    def _task_id(self, obj: T) -> str | None:
        try:
            return self.task_id_of(obj)
        except Exception:  # a log field is never worth a fault
            return None

    def _fault_outcome(self, delivery: Delivery, e: Exception) -> Outcome:
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]  # a task group's wrapper says nothing; name the cause
        reason = error_text(e)
        if delivery.num_delivered >= self.poison_after:
            log.error("fault_final", error=reason, deliveries=delivery.num_delivered, exc_info=e)
            return Term(
                f"poison pill: its handler raised on {delivery.num_delivered} deliveries "
                f"(poison_after={self.poison_after}, max_deliver={self.cd.max_deliver}); last error: {reason}",
                type(e).__name__,
                kind="poison",
            )
        log.warning("fault_retry", error=reason, deliveries=delivery.num_delivered, exc_info=e)
        return Nak(self.bus.cfg.nak_delay_s * delivery.num_delivered, reason)

    async def _settle(self, msg: Msg, outcome: Outcome) -> None:
        match outcome:
            case Ack():
                if await self._safely(msg.ack, "ack"):
                    self.stats.counters["acked"] += 1
            case Nak(delay_s=delay):
                self.admission.given_back(stream_seq(msg))
                if await self._safely(lambda: msg.nak(delay=delay or None), "nak"):
                    self.stats.counters["naked"] += 1
            case Term(reason=reason, error_type=error_type, kind=kind):
                await self._dead(msg, kind, reason, error_type)
            case Hold():  # kept in hand (alive) until ``release``
                self.admission.given_back(stream_seq(msg))

    async def _safely(self, op: Callable[[], Awaitable[object]], what: str) -> bool:
        return await safely(op, what, self.stats.counters)

    async def _dead(self, msg: Msg, kind: str, reason: str, error_type: str) -> None:
        await dead_letter_and_term(self.bus, self.stage, msg, kind, reason, error_type, self.stats.counters,
                                   backoff_max_s=self._backoff_max_s)


__all__ = [
    "DEAD_KINDS", "Ack", "ActorFatalError", "Consumer", "ConsumerStats", "ConsumerUnavailableError", "Delivery",
    "Forward", "Hold", "Nak", "Outcome", "Term", "error_text",
]
