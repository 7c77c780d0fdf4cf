"""The NATS side of every actor: connection, topology, publish, dead letters.

``Bus.connect`` retries (``rlvr.actors.retry``) until ``connect_timeout_s`` and then
fails loudly; after that nats-py reconnects on its own. It presents the
credentials and TLS files ``NatsConfig`` names (``rlvr.actors.secrets`` reads
them; no error or log line carries a secret). ``ensure_topology`` (the
learner, ``rlvr-actor init``) creates or updates the run's streams,
consumers and buckets, and keeps them (``keep_topology``: what was deleted is
recreated); every other role calls ``check_topology``, which only waits for
them and checks them (``rlvr.actors.topology``). Every publish
waits for JetStream's acknowledgement under a deadline, carries a stable
``Nats-Msg-Id`` (deduplicated inside the stream's duplicate window) and the
current ``traceparent``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import Any

import anyio
import msgspec
import nats
import nats.errors as nats_errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import MaxPayloadError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import BucketNotFoundError

from rlvr.actors import topology
from rlvr.actors.bus_faults import is_transient_bus_fault
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.actors.logs import get_logger
from rlvr.actors.nats_fetch import take_queued_at_once
from rlvr.actors.retry import retrying
from rlvr.actors.secrets import connect_options, redact
from rlvr.actors.tracing import inject_headers
from rlvr.protocol import DeadLetter, RunNames, encode
from rlvr.protocol.codec import Message
from rlvr.protocol.subjects import ConsumerDef, StreamDef

log = get_logger("rlvr.bus")


class BusConnectError(RuntimeError):
    pass


class Bus:
    def __init__(self, nc: NATS, names: RunNames, nats_cfg: NatsConfig, bus_cfg: BusConfig, replica: str) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream(timeout=nats_cfg.request_timeout_s)
        self.names = names
        self.nats_cfg = nats_cfg
        self.cfg = bus_cfg
        self.replica = replica
        # Set when nats-py gives up reconnecting; the actor then exits non-zero.
        self.closed = anyio.Event()
        # True once this process created the topology (the learner, `init`): only
        # then does it create consumers; every other role binds existing ones.
        self.owns_topology = False
        # Set by ``close``: the disconnect that follows is ours, not a fault to warn about.
        self.closing = False

    # --- lifecycle ----------------------------------------------------------
    @classmethod
    async def connect(cls, nats_cfg: NatsConfig, bus_cfg: BusConfig, names: RunNames, replica: str) -> Bus:
        deadline = time.monotonic() + nats_cfg.connect_timeout_s
        holder: list[Bus] = []
        auth = connect_options(nats_cfg)  # a missing secret file fails here, naming the key
        refused: list[Exception] = []

        async def on_error(e: Exception) -> None:
            if "authorization" in str(e).lower():
                refused.append(e)  # nats-py retries a refused login until our deadline
            await _on_error(e)

        async def on_closed() -> None:
            if holder:
                holder[0].closed.set()

        async def on_disconnect() -> None:
            if holder and holder[0].closing:
                log.info("nats_closed")
            else:
                log.warning("nats_disconnected")

        try:
            async for attempt in retrying("connect", until=nats_cfg.connect_timeout_s, on=_may_connect_later,
                                          wait_initial=0.1, wait_max=2.0):
                with attempt:
                    # nats-py retries a failed first connect on its own schedule
                    # (max_reconnect_attempts x reconnect_wait); our deadline wins.
                    with anyio.fail_after(max(0.5, deadline - time.monotonic())):
                        nc = await nats.connect(
                            servers=[u.strip() for u in nats_cfg.url.split(",")],
                            name=f"rlvr-{names.run}-{replica}",
                            connect_timeout=max(1, int(nats_cfg.connect_timeout_s)),
                            reconnect_time_wait=nats_cfg.reconnect_wait_s,
                            max_reconnect_attempts=nats_cfg.max_reconnect_attempts,
                            allow_reconnect=True,
                            error_cb=on_error,
                            disconnected_cb=on_disconnect,
                            reconnected_cb=_on_reconnect,
                            closed_cb=on_closed,
                            **auth,
                        )
        except Exception as e:  # nats raises several types for "no server"
            why = "the server refused the credentials (Authorization Violation)" if refused else repr(e)
            raise BusConnectError(redact(f"cannot reach NATS at {nats_cfg.url}: {why}")) from None
        holder.append(cls(nc, names, nats_cfg, bus_cfg, replica))
        return holder[0]

    async def close(self) -> None:
        """Flush and drain, or, where the connection is being re-made (or the flush finds no
        server), just close: a close never raises, so the reason a role stops is the one it shows."""
        self.closing = True
        if not self.nc.is_closed:
            with anyio.move_on_after(5, shield=True):
                try:
                    await self.nc.flush(timeout=2)
                    await self.nc.drain()
                except nats_errors.Error as e:  # reconnecting, or no answer: what was unsent is redelivered
                    log.info("nats_close_without_flush", error=repr(e))
                    await self.nc.close()

    # --- topology -----------------------------------------------------------
    def stream_defs(self) -> list[StreamDef]:
        return self.names.streams(self.cfg.scored_max_age_s, self.cfg.duplicate_window_s)

    async def ensure_topology(self) -> list[str]:
        """Create or update the run's streams, consumers and buckets: the learner and `init` only.

        Idempotent, so a transient fault (a cluster electing a leader, a
        partition, a full store) is retried for at most ``bus.topology_wait_s``."""
        touched = await self._retrying(lambda: topology.ensure_topology(self), "ensure_topology")
        self.owns_topology = True
        return touched

    async def _retrying(self, op, what: str):
        """``op()``, retried on transient faults (an election, a partition, a full
        store) for at most ``bus.topology_wait_s``: topology calls are idempotent."""
        async for attempt in retrying(what, until=self.cfg.topology_wait_s, wait_initial=0.5):
            with attempt:
                return await op()

    async def keep_topology(self) -> None:
        """The owner's repair loop (the learner runs it for its whole life): every
        ``bus.heartbeat_every_s``, recreate whatever of the topology was deleted
        (``topology.repair``), so a deleted stream or role durable never needs an
        operator. A pass the bus cannot answer now is tried again at the next; any
        other failure is logged and tried again too: repair must not stop the owner."""
        if not self.owns_topology:
            return
        while True:
            await anyio.sleep(self.cfg.heartbeat_every_s)
            try:
                await topology.repair(self)
            except Exception as e:
                level = log.info if is_transient_bus_fault(e) else log.error
                level("topology_repair_failed", error=f"{type(e).__name__}: {e}")

    async def check_topology(self, role: str) -> None:
        """Wait (bounded) for what ``role`` needs and check its shape; never creates or changes it."""
        await topology.check_topology(self, role)

    def consumer_def(self, kind: str) -> ConsumerDef:
        stream, subject = {
            "rollout": (self.names.stream("TASKS"), self.names.tasks),
            "verify": (self.names.stream("ROLLOUTS"), self.names.rollouts),
            "learn": (self.names.stream("SCORED"), self.names.scored),
        }[kind]
        return ConsumerDef(
            stream=stream,
            durable=kind,
            filter_subject=subject,
            ack_wait_s=self.cfg.ack_wait_s,
            max_deliver=self.cfg.max_deliver,
            max_ack_pending=self.cfg.max_ack_pending,
        )

    async def pull_subscription(
        self, cd: ConsumerDef, *, start_seq: int | None = None
    ) -> JetStreamContext.PullSubscription:
        """Bind to the durable consumer ``cd``.

        The topology's owner (the learner) creates it if absent, and
        ``start_seq`` (the learner after a restart) recreates it so it
        delivers from that stream sequence on. Any other role only binds an
        existing consumer, waiting for it as ``check_topology`` does.
        """
        if self.owns_topology:
            await self._retrying(lambda: topology.create_consumer(self, cd, start_seq), f"create_consumer {cd.durable}")
        else:
            if start_seq is not None:
                raise topology.TopologyMismatchError(f"only the topology's owner may reposition consumer {cd.durable}")
            await topology.check_consumer(self, cd, cd.durable)
        psub = await self.js.pull_subscribe_bind(durable=cd.durable, stream=cd.stream)
        if not take_queued_at_once(psub):
            log.warning("nats_fetch_slow_path", why="this nats-py's subscription internals differ from the pinned one")
        return psub

    # --- publishing ---------------------------------------------------------
    def headers_for(self, msg_id: str | None = None, headers: dict[str, str] | None = None) -> dict[str, str]:
        """The headers of a message published now: ``headers``, the current
        trace's ``traceparent`` and ``Nats-Msg-Id`` = ``msg_id``."""
        hdrs = inject_headers(headers)
        if msg_id is not None:
            hdrs["Nats-Msg-Id"] = msg_id
        return hdrs

    async def send(self, subject: str, data: bytes, headers: dict[str, str]) -> asyncio.Future[js_api.PubAck]:
        """Publish an encoded message to JetStream without waiting: the future
        of its PubAck (``pub_acks`` waits for it)."""
        return await self.js.publish_async(subject, data, headers=headers)

    async def publish(
        self, subject: str, msg: Message, *, msg_id: str | None = None, headers: dict[str, str] | None = None
    ) -> js_api.PubAck:
        """Publish ``msg`` to JetStream and wait for its acknowledgement (nats'
        ``TimeoutError`` past ``nats.request_timeout_s``: a transient bus fault)."""
        fut = await self.send(subject, encode(msg), self.headers_for(msg_id, headers))
        return (await self._acked([fut]))[0]

    async def publish_many(self, subject: str, items: list[tuple[Message, str | None]]) -> list[js_api.PubAck]:
        """Publish every ``(message, msg_id)`` at once and wait for all their
        acknowledgements under one deadline (a group of samples: one socket
        write, not one round trip each). Raises the first failure; on a
        timeout, nats' ``TimeoutError`` (a transient bus fault)."""
        hdrs = inject_headers()
        futures = []
        try:
            for msg, msg_id in items:
                futures.append(await self.send(subject, encode(msg), self.headers_for(msg_id, hdrs)))
        except BaseException:
            for f in futures:
                f.cancel()
            raise
        return await self._acked(futures)

    async def _acked(self, futures: list[asyncio.Future[js_api.PubAck]]) -> list[js_api.PubAck]:
        """The PubAcks of ``futures``; the first failure is raised (``pub_acks``)."""
        results = await self.pub_acks(futures)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results  # type: ignore[return-value]

    async def pub_acks(self, futures: list[asyncio.Future[js_api.PubAck]]) -> list[js_api.PubAck | Exception]:
        """Each future's PubAck, or its error, all within ``nats.request_timeout_s``.

        One timer for the lot, which fails the futures still pending with
        nats' ``TimeoutError``; cheaper per message than ``js.publish``'s
        request (a ``wait_for`` each), and the same errors: ``APIError`` (a full
        store...), ``NoStreamResponseError``. Cancelled, it cancels the futures
        still pending (freeing nats-py's table entries)."""

        def expire() -> None:
            for f in futures:
                if not f.done():
                    f.set_exception(NatsTimeoutError())

        timer = asyncio.get_running_loop().call_later(self.nats_cfg.request_timeout_s, expire)
        results: list[js_api.PubAck | Exception] = []
        try:
            for f in futures:
                try:
                    results.append(await f)
                except Exception as e:
                    results.append(e)
            return results
        finally:
            timer.cancel()
            for f in futures:
                f.cancel()  # no-op when done

    async def publish_core(self, subject: str, msg: Message) -> None:
        """Fire-and-forget core NATS publish (heartbeats)."""
        await self.nc.publish(subject, encode(msg))

    async def dead_letter(
        self, stage: str, msg: Msg, reason: str, error_type: str, kind: str = "term", *, bare: bool = False
    ) -> bool:
        """Publish ``msg`` to DEAD with its reason; return True when it went as a reference.

        A copy that would not fit the server's ``max_payload`` (with the
        letter's own fields around it) goes as a reference instead: stream,
        sequence, size and the first bytes. ``bare``: a reference with none of
        the message's bytes or headers (the caller's fallback when copying
        them failed). Raises on any publish failure (timeout, storage full):
        the caller keeps the message and retries.
        """
        meta = _safe_metadata(msg)
        seq = meta.sequence.stream if meta else None
        data = b"" if bare else bytes(msg.data)
        headers = {} if bare else dict(msg.headers or {})
        letter = DeadLetter(
            run=self.names.run,
            stage=stage,
            reason=reason[:_REASON_CHARS],
            error_type=error_type,
            delivery_count=meta.num_delivered if meta else 0,
            subject=msg.subject,
            headers=headers,
            data=data,
            replica=self.replica,
            created_at=time.time(),
            kind=kind,
            stream=meta.stream if meta else "",
            stream_seq=seq or 0,
            size=len(data) if not bare else _safe_size(msg),
        )
        msg_id = f"dead/{stage}/{seq}" if seq is not None else None
        reference = bare or len(data) + _headers_size(headers) + _LETTER_OVERHEAD > self.nc.max_payload
        if not reference:
            try:
                await self.publish(self.names.dead(stage), letter, msg_id=msg_id)
            except MaxPayloadError:
                reference = True  # the estimate was short: send the reference below
        if reference:
            kept = {k: v[:_REASON_CHARS] for k, v in headers.items() if k in _REFERENCE_HEADERS}
            letter = msgspec.structs.replace(letter, data=data[:_REFERENCE_PREFIX], headers=kept, reference=True)
            await self.publish(self.names.dead(stage), letter, msg_id=msg_id)
        log.warning(
            "dead_letter", stage=stage, kind=kind, reason=reason[:500], error_type=error_type,
            stream_seq=seq, reference=reference,
        )
        return reference

    # --- run state (KV) -------------------------------------------------------
    async def kv_put(self, key: str, value: bytes) -> None:
        """Put ``key`` in the run's KV bucket. A bucket that is gone (deleted) is recreated first
        when this role owns the topology (``topology.repair``, which its next pass would run
        anyway), so a checkpoint never fails on it; any other role's put fails naming it."""
        try:
            kv = await self.js.key_value(self.names.kv_bucket)
        except BucketNotFoundError:
            if not self.owns_topology:
                raise
            await topology.repair(self)
            kv = await self.js.key_value(self.names.kv_bucket)
        await kv.put(key, value)


# Room left in a dead letter for its own fields next to a copied payload.
_LETTER_OVERHEAD = 8 * 1024
# A reference keeps this much of the payload, enough to see what it was.
_REFERENCE_PREFIX = 4 * 1024
_REASON_CHARS = 4 * 1024
_REFERENCE_HEADERS = ("Nats-Msg-Id", "traceparent")


def _headers_size(headers: dict[str, str]) -> int:
    return sum(len(k) + len(v) + 4 for k, v in headers.items())


def _safe_size(msg: Msg) -> int:
    try:
        return len(msg.data)
    except Exception:  # a bare letter is the fallback: it must not fail on the message
        return 0


def _safe_metadata(msg: Msg) -> Any:
    try:
        return msg.metadata
    except Exception:  # not a JetStream message (core publish)
        return None


def _may_connect_later(e: BaseException) -> bool:
    """No server yet (refused, unreachable, no answer in time): worth another try
    until the connect deadline (a TLS handshake failure is an OSError too). A bad URL is not."""
    return isinstance(e, (nats_errors.NoServersError, OSError, TimeoutError)) or is_transient_bus_fault(e)


def default_replica_id(role: str) -> str:
    return f"{role}-{socket.gethostname()}-{os.getpid()}"


async def _on_error(e: Exception) -> None:
    log.warning("nats_error", error=repr(e))


async def _on_reconnect() -> None:
    log.info("nats_reconnected")
