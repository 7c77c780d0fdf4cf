"""What the autoscaler reads on the bus, and the heartbeat it sends.

It connects as its own NATS user (``autoscale``: heartbeats in, the verify
consumer's info, its own status subject out; nothing else, see
docs/security.md). The backlog is the server's count for the ``verify``
durable: ``num_pending + num_ack_pending``. Heartbeats of the scaled role
are kept by replica name with the local time they arrived, so their age
never depends on another host's clock.
"""

from __future__ import annotations

import time

from rlvr.actors.config import NatsConfig
from rlvr.actors.logs import get_logger
from rlvr.protocol import Heartbeat, MessageDecodeError, RunNames, decode, encode

log = get_logger("rlvr.autoscale")

CONSUMERS = {"verify": ("ROLLOUTS", "verify")}


class BusView:
    """An open connection: ``beats`` fills itself; ``backlog()`` asks the server."""

    def __init__(self, run: str, nats_cfg: NatsConfig, role: str) -> None:
        self.names = RunNames(run)
        self.nats_cfg = nats_cfg.for_role("autoscale")
        self.role = role
        self.beats: dict[str, tuple[Heartbeat, float]] = {}  # replica -> (heartbeat, monotonic time heard)
        self.last_error = ""
        self._nc = None
        self._js = None

    async def __aenter__(self) -> BusView:
        import nats

        from rlvr.actors.secrets import connect_options

        cfg = self.nats_cfg
        self._nc = await nats.connect(
            [u.strip() for u in cfg.url.split(",")],
            connect_timeout=max(1, int(cfg.connect_timeout_s)),
            reconnect_time_wait=cfg.reconnect_wait_s,
            max_reconnect_attempts=-1,  # the scaler outlives a server restart
            **connect_options(cfg),
        )
        self._js = self._nc.jetstream(timeout=cfg.request_timeout_s)
        await self._nc.subscribe(f"{self.names.prefix}.status.{self.role}.>", cb=self._on_heartbeat)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._nc is not None:
            await self._nc.close()

    async def _on_heartbeat(self, msg) -> None:
        try:
            hb = decode(msg.data, Heartbeat)
        except MessageDecodeError:
            return  # not ours to judge: `status` ignores it too
        if hb.run == self.names.run and hb.role == self.role:
            self.beats[hb.replica] = (hb, time.monotonic())

    async def backlog(self) -> int | None:
        """Pending + ack pending on the role's durable; None (and ``last_error``) when unreadable."""
        stream, durable = CONSUMERS[self.role]
        try:
            ci = await self._js.consumer_info(self.names.stream(stream), durable)
        except Exception as e:  # not created yet (the learner makes it), or the server is away
            self.last_error = f"{type(e).__name__}: {e}"[:200]
            return None
        self.last_error = ""
        return int(ci.num_pending or 0) + int(ci.num_ack_pending or 0)

    async def publish(self, hb: Heartbeat) -> None:
        try:
            await self._nc.publish(self.names.status("autoscale", hb.replica), encode(hb))
        except Exception as e:  # a missed heartbeat is not a fault
            log.debug("autoscale_heartbeat_failed", error=repr(e))
