"""Which policy version each rollout replica serves, from its heartbeats.

The learner uses it to make an evaluation measure the policy it names: the
final pass@1 waits until every live rollout replica reports the version
just published (bounded, and logged when it gives up).
"""

from __future__ import annotations

import time

import anyio

from rlvr.actors.bus import Bus
from rlvr.actors.logs import get_logger
from rlvr.protocol import Heartbeat, MessageDecodeError, decode

log = get_logger("rlvr.learner.rollouts")


class RolloutVersions:
    def __init__(self, bus: Bus, live_within_s: float = 10.0) -> None:
        self.bus = bus
        self.live_within_s = live_within_s
        self.seen: dict[str, tuple[float, int]] = {}  # replica -> (last heartbeat, version)
        self._changed = anyio.Event()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        sub = await self.bus.nc.subscribe(self.bus.names.status("rollout", "*"))
        task_status.started()
        try:
            async for msg in sub.messages:
                try:
                    hb = decode(msg.data, Heartbeat)
                except MessageDecodeError:
                    continue
                self.seen[hb.replica] = (time.monotonic(), hb.policy_version)
                self._changed.set()
                self._changed = anyio.Event()
        finally:
            with anyio.CancelScope(shield=True):
                await sub.unsubscribe()

    def live_versions(self) -> dict[str, int]:
        now = time.monotonic()
        return {r: v for r, (t, v) in self.seen.items() if now - t < self.live_within_s}

    async def wait_for_version(self, version: int, timeout_s: float) -> bool:
        with anyio.move_on_after(timeout_s):
            while True:
                live = self.live_versions()
                if live and all(v >= version for v in live.values()):
                    return True
                await self._changed.wait()
        log.warning("rollouts_behind", want=version, live=self.live_versions())
        return False
