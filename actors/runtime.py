"""The actor host: one place that runs any role.

``serve`` connects to NATS, creates the run's topology (the learner) or waits
for it and checks it (every other role), starts heartbeats and
signal handling, runs the role, and drains on the way out. A role is an
object with ``role`` (its name), ``async run(ctx)`` and ``heartbeat()``; it
returns from ``run`` when ``ctx.stop`` is set (or when its work is done, as
the learner does after its last step).

Exit codes tell the truth: ``serve`` returns normally after a clean stop
(SIGTERM/SIGINT or done) and raises on a fault, which the CLI turns into a
non-zero exit. A second signal, or a drain that overruns its deadline,
cancels the role; its consumers still nak what they hold (shielded).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from typing import Protocol

import anyio
import msgspec

from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.actors.logs import get_logger
from rlvr.protocol import Heartbeat, RunNames

log = get_logger("rlvr.runtime")


class BusClosedError(RuntimeError):
    pass


class HeartbeatFields(msgspec.Struct):
    policy_version: int = 0
    in_flight: int = 0
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    alerts: list[str] = []  # warnings the actor raises now, one line each


class ActorContext:
    def __init__(self, bus: Bus, replica: str, stop: anyio.Event, seed: int) -> None:
        self.bus = bus
        self.names: RunNames = bus.names
        self.replica = replica
        self.stop = stop
        self.started_at = time.time()
        self.seed = seed
        self.state: str = "starting"


class RoleActor(Protocol):
    role: str

    async def run(self, ctx: ActorContext) -> None: ...

    def heartbeat(self) -> HeartbeatFields: ...


async def serve(
    *, run: str, seed: int, nats: NatsConfig, bus_cfg: BusConfig, replica: str, make_actor: Callable[[], RoleActor]
) -> None:
    """Run one role until it returns or a signal stops it. The role's own
    start-up (the learner publishing the resolved config, say) is its business,
    in its ``run``; this host knows only the run id, the seed and the bus."""
    names = RunNames(run)
    actor = make_actor()
    bus = await Bus.connect(nats.for_role(actor.role), bus_cfg, names, replica)  # its own user
    stop = anyio.Event()
    ctx = ActorContext(bus, replica, stop, seed)
    log.info("actor_start", nats=nats.url, pid=os.getpid())
    try:
        # Topology has one owner: the learner creates and updates it; every
        # other role waits for it and checks it, and never rewrites it.
        if actor.role == "learn":
            await bus.ensure_topology()
        else:
            await bus.check_topology(actor.role)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch_signals, stop, tg.cancel_scope, bus_cfg.drain_timeout_s + 3)
            tg.start_soon(_heartbeats, ctx, actor, bus_cfg.heartbeat_every_s)
            tg.start_soon(_watch_connection, bus, stop)
            tg.start_soon(bus.keep_topology)  # the owner recreates what was deleted; others return at once
            ctx.state = "running"
            await actor.run(ctx)
            ctx.state = "draining"
            tg.cancel_scope.cancel()
        with anyio.move_on_after(2, shield=True):
            await _send_heartbeat(ctx, actor)
        log.info("actor_stop", reason="signal" if stop.is_set() else "done")
    finally:
        await bus.close()


async def _watch_signals(stop: anyio.Event, scope: anyio.CancelScope, hard_deadline_s: float) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            if not stop.is_set():
                log.info("stop_requested", signal=signal.Signals(signum).name)
                stop.set()
                # Whatever happens in the role, the process ends in bounded time.
                scope.deadline = min(scope.deadline, anyio.current_time() + hard_deadline_s)
            else:
                log.warning("stop_forced", signal=signal.Signals(signum).name)
                scope.cancel()


async def _watch_connection(bus: Bus, stop: anyio.Event) -> None:
    await bus.closed.wait()
    if not stop.is_set():
        raise BusClosedError(f"connection to NATS at {bus.nats_cfg.url} closed and not re-established")


async def _heartbeats(ctx: ActorContext, actor: RoleActor, every_s: float) -> None:
    while True:
        try:
            await _send_heartbeat(ctx, actor)
        except Exception as e:  # a missed heartbeat is not a fault; reconnects handle the rest
            log.debug("heartbeat_failed", error=repr(e))
        await anyio.sleep(every_s)


async def _send_heartbeat(ctx: ActorContext, actor: RoleActor) -> None:
    fields = actor.heartbeat()
    hb = Heartbeat(
        run=ctx.names.run,
        role=actor.role,  # type: ignore[arg-type]
        replica=ctx.replica,
        host=socket.gethostname(),
        pid=os.getpid(),
        sent_at=time.time(),
        started_at=ctx.started_at,
        state="draining" if ctx.stop.is_set() else ctx.state,  # type: ignore[arg-type]
        policy_version=fields.policy_version,
        in_flight=fields.in_flight,
        counters=fields.counters,
        gauges=fields.gauges,
        alerts=fields.alerts,
    )
    await ctx.bus.publish_core(ctx.names.status(actor.role, ctx.replica), hb)
