"""A small synchronous test client for a real NATS server.

Tests stay plain functions: each call runs one short ``anyio.run``. It reads
streams through ephemeral ordered consumers (never the actors' durables) so
it observes without taking part.
"""

from __future__ import annotations

from typing import Any, TypeVar

import anyio
import nats

from rlvr.protocol import RunNames, Sample, SampleGroup, Scored, ScoredGroup, decode, encode
from rlvr.protocol.codec import Message
from rlvr.protocol.groups import scored_group_msg_id

T = TypeVar("T")


class BusClient:
    def __init__(self, url: str, run: str) -> None:
        self.url = url
        self.names = RunNames(run)

    async def _with_js(self, fn):
        nc = await nats.connect(self.url, connect_timeout=2, max_reconnect_attempts=1)
        try:
            return await fn(nc, nc.jetstream(timeout=5))
        finally:
            await nc.close()

    def publish(self, subject: str, payload: Message | bytes, msg_id: str | None = None, headers: dict | None = None) -> None:
        data = payload if isinstance(payload, bytes) else encode(payload)
        hdrs = dict(headers or {})
        if msg_id:
            hdrs["Nats-Msg-Id"] = msg_id

        async def go(nc, js):
            await js.publish(subject, data, headers=hdrs or None)

        anyio.run(self._with_js, go)

    def publish_scored(self, groups: list[ScoredGroup]) -> None:
        """Each group to SCORED under the id a verifier gives it (``scored_group_msg_id``), in order."""
        for g in groups:
            self.publish(self.names.scored, g, msg_id=scored_group_msg_id(g))

    def stream_messages(self, kind: str) -> list[tuple[int, bytes, dict[str, str]]]:
        """Every message currently stored in the run's stream ``kind``."""

        async def go(nc, js):
            name = self.names.stream(kind)
            try:
                info = await js.stream_info(name)
            except Exception:
                return []
            out = []
            seq, last = info.state.first_seq, info.state.last_seq
            while info.state.messages and seq <= last:
                try:
                    raw = await js.get_msg(name, seq)
                    out.append((seq, raw.data, dict(raw.headers or {})))
                except Exception:  # deleted (work queue acked) or purged
                    pass
                seq += 1
            return out

        return anyio.run(self._with_js, go)

    def decoded(self, kind: str, typ: type[T]) -> list[T]:
        return [decode(data, typ) for _, data, _ in self.stream_messages(kind)]

    def rollouts(self) -> list[Sample]:
        """Every sample on ROLLOUTS, each group message's members in order."""
        return [s for g in self.decoded("ROLLOUTS", SampleGroup) for s in g.samples]

    def scored(self) -> list[Scored]:
        """Every scored sample on SCORED, each group message's members in order."""
        return [sc for g in self.decoded("SCORED", ScoredGroup) for sc in g.items()]

    def stream_count(self, kind: str) -> int:
        async def go(nc, js):
            try:
                return (await js.stream_info(self.names.stream(kind))).state.messages
            except Exception:
                return 0

        return anyio.run(self._with_js, go)

    def consumer(self, kind: str, durable: str) -> Any:
        async def go(nc, js):
            try:
                return await js.consumer_info(self.names.stream(kind), durable)
            except Exception:
                return None

        return anyio.run(self._with_js, go)

    def wait_heartbeat(self, predicate, timeout_s: float = 30.0):
        """The first heartbeat for which ``predicate(hb)`` holds (bounded wait)."""
        from rlvr.protocol import Heartbeat

        async def go(nc, js):
            sub = await nc.subscribe(f"{self.names.prefix}.status.>")
            try:
                with anyio.fail_after(timeout_s):
                    async for msg in sub.messages:
                        hb = decode(msg.data, Heartbeat)
                        if predicate(hb):
                            return hb
            finally:
                await sub.unsubscribe()

        return anyio.run(self._with_js, go)


