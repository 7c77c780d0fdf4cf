"""A read-only view of one run's bus, from the chaos runner's own thread.

``Observer`` keeps one NATS connection (reconnecting forever, so it outlives
a server SIGKILL) on an asyncio loop in a background thread. It records the
last heartbeat of every replica, and reads streams without taking part: an
ephemeral consumer with no acks for SCORED and DEAD (never the actors'
durables), ``consumer_info`` for pending counts. SCORED carries one message
per task's group (protocol/groups.py); the observer keeps one ``ScoredCopy``
per member, under its message's stream seq, so the invariants stay per sample. Every call has a deadline
and returns ``None`` (or raises ``ObserverError``) rather than hang. A
transient bus fault (``is_transient_bus_fault``: a 503 while a cluster elects
a leader, a timeout while a server restarts) is retried, with the roles' own
policy (``rlvr.actors.retry``), for at most ``TRANSIENT_RETRY_S``: the runner must not fail on what its
own faults cause and the roles ride out.

Not here: anything that changes the bus except the two faults that must
(``delete_consumer``, ``purge``) and the filler of the store-full fault.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import nats
from nats.js import api

from rlvr.actors.retry import call_retrying
from rlvr.protocol import DeadLetter, Heartbeat, RunNames, Scored, ScoredGroup, decode


TRANSIENT_RETRY_S = 60.0  # how long a call rides out transient bus faults before ObserverError


class ObserverError(RuntimeError):
    pass


class ScoredCopy:
    """One sample of a SCORED message: ``seq`` is its group message's stream seq."""

    __slots__ = ("seq", "sample_id", "group_id", "group_size", "purpose", "task_id")

    def __init__(self, seq: int, sc: Scored) -> None:
        s = sc.sample
        self.seq, self.sample_id, self.group_id = seq, sc.sample_id, s.group_id
        self.group_size, self.purpose, self.task_id = s.group_size, s.purpose, s.task_id


class Observer:
    def __init__(self, urls: str, run: str) -> None:
        self.urls, self.names = urls, RunNames(run)
        self.heartbeats: dict[str, tuple[float, Heartbeat]] = {}  # replica -> (monotonic arrival, heartbeat)
        # (stream seq, member index) -> one sample's copy, every member of every SCORED message ever read
        self.scored: dict[tuple[int, int], ScoredCopy] = {}
        self.scored_undecodable: list[int] = []
        self._scored_next = 1
        self._scored_lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="chaos-observer")
        self._thread.start()
        self._nc: Any = None
        self.call(self._connect(), timeout_s=30)

    # --- plumbing ------------------------------------------------------------------
    def call(self, coro, timeout_s: float = 20.0):
        """``coro``'s result within ``timeout_s``. Given a callable that makes the coroutine, a transient bus
        fault is retried by the project's one retry policy (``call_retrying``) for ``TRANSIENT_RETRY_S``."""
        work = (call_retrying("chaos_observer", lambda: asyncio.wait_for(coro(), timeout_s), until=TRANSIENT_RETRY_S)
                if callable(coro) else asyncio.wait_for(coro, timeout_s))
        fut = asyncio.run_coroutine_threadsafe(work, self._loop)
        try:
            return fut.result(timeout_s + TRANSIENT_RETRY_S + 5 if callable(coro) else timeout_s + 5)
        except Exception as e:
            raise ObserverError(f"{type(e).__name__}: {e}") from e

    def try_call(self, coro, timeout_s: float = 20.0, default=None):
        try:
            return self.call(coro, timeout_s)
        except ObserverError:
            return default

    async def _connect(self) -> None:
        async def quiet(e: Exception) -> None:  # a server the faults killed: reconnecting is the point
            self.connection_errors += 1

        self.connection_errors = 0
        self._nc = await nats.connect(self.urls.split(","), max_reconnect_attempts=-1, reconnect_time_wait=0.5,
                                      connect_timeout=3, allow_reconnect=True, error_cb=quiet)

        async def on_hb(msg):
            try:
                hb = decode(msg.data, Heartbeat)
            except Exception:  # noqa: BLE001 (a heartbeat we cannot read is simply not counted)
                return
            self.heartbeats[hb.replica] = (time.monotonic(), hb)

        await self._nc.subscribe(f"{self.names.prefix}.status.>", cb=on_hb)

    @property
    def js(self):
        return self._nc.jetstream(timeout=5)

    def close(self) -> None:
        try:
            self.call(self._nc.close(), timeout_s=5)
        except ObserverError:
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    # --- heartbeats ----------------------------------------------------------------
    def last_heartbeat(self, replica: str) -> tuple[float, Heartbeat] | None:
        return self.heartbeats.get(replica)

    def wait_heartbeat(self, replica: str, *, after: float, timeout_s: float, pred=None) -> Heartbeat | None:
        """The first heartbeat of ``replica`` that arrived after monotonic ``after`` (and satisfies ``pred``)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = self.heartbeats.get(replica)
            if got and got[0] > after and (pred is None or pred(got[1])):
                return got[1]
            time.sleep(0.1)
        return None

    # --- streams -------------------------------------------------------------------
    def stream_state(self, kind: str) -> Any:
        return self.try_call(lambda: self.js.stream_info(self.names.stream(kind)), timeout_s=8)

    def consumer_info(self, kind: str, durable: str) -> Any:
        return self.try_call(lambda: self.js.consumer_info(self.names.stream(kind), durable), timeout_s=8)

    def _read(self, kind: str, start: int, upto: int) -> list[tuple[int, bytes]]:
        async def go():
            out: list[tuple[int, bytes]] = []
            js = self.js
            sub = await js.pull_subscribe(
                f"{self.names.prefix}.{'scored' if kind == 'SCORED' else 'dead.>'}", durable=None,
                stream=self.names.stream(kind),
                config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start,
                                          ack_policy=api.AckPolicy.NONE, inactive_threshold=30.0, mem_storage=True),
            )
            try:
                while True:
                    try:
                        msgs = await sub.fetch(500, timeout=1.0)
                    except nats.errors.TimeoutError:
                        break
                    for m in msgs:
                        out.append((m.metadata.sequence.stream, m.data))
                    if out and out[-1][0] >= upto:
                        break
            finally:
                await sub.unsubscribe()
            return out

        return self.call(go, timeout_s=60)

    def read_scored(self) -> dict[tuple[int, int], ScoredCopy]:
        """Read SCORED messages not read yet (incrementally: retention may remove them later) and
        return a snapshot of all read so far. The runner and the scenario's sampler thread both
        call it; the snapshot is the caller's to iterate while the other reads on."""
        with self._scored_lock:
            self._read_scored()
            return dict(self.scored)

    def _read_scored(self) -> None:
        info = self.stream_state("SCORED")
        if info is None or info.state.last_seq < self._scored_next:
            return
        start = max(self._scored_next, info.state.first_seq)
        for seq, data in self._read("SCORED", start, info.state.last_seq):
            try:
                group = decode(data, ScoredGroup)
                copies = {(seq, i): ScoredCopy(seq, sc) for i, sc in enumerate(group.items())}
            except Exception:  # noqa: BLE001 (poison the runner injected, or worse: reported by the checker)
                self.scored_undecodable.append(seq)
            else:
                self.scored.update(copies)
            self._scored_next = max(self._scored_next, seq + 1)

    def dead_letters(self) -> list[DeadLetter]:
        info = self.stream_state("DEAD")
        if info is None or info.state.messages == 0:
            return []
        out = []
        for _, data in self._read("DEAD", info.state.first_seq, info.state.last_seq):
            try:
                out.append(decode(data, DeadLetter))
            except Exception:  # noqa: BLE001
                continue
        return out

    # --- the few changes faults make -------------------------------------------------
    def delete_consumer(self, kind: str, durable: str) -> bool:
        return bool(self.try_call(self.js.delete_consumer(self.names.stream(kind), durable), timeout_s=8))

    def purge(self, kind: str, keep: int | None = None, upto_seq: int | None = None) -> None:
        self.call(lambda: self.js.purge_stream(self.names.stream(kind), keep=keep, seq=upto_seq), timeout_s=10)

    def publish(self, subject: str, data: bytes, msg_id: str | None = None) -> Any:
        headers = {"Nats-Msg-Id": msg_id} if msg_id else None
        return self.call(lambda: self.js.publish(subject, data, headers=headers), timeout_s=10)

    def max_payload(self) -> int:
        return int(self._nc.max_payload)

    def stream_leader(self, kind: str) -> str | None:
        info = self.stream_state(kind)
        return info.cluster.leader if info is not None and info.cluster is not None else None

    def connected_url(self) -> str:
        return str(self._nc.connected_url.netloc) if self._nc and self._nc.connected_url else ""
