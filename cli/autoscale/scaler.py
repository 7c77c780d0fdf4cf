"""The autoscaler: read the bus, decide (``policy.decide``), act on the fleet, say what it did.

It runs in a thread of its own with its own event loop, so the caller (``up``'s
supervisor loop, or ``rlvr-actor autoscale``) stays synchronous: ``start()``,
then read ``last``, ``fatal`` and ``fleet.children()``, then ``stop()``.

Every decision that changes something, and every fleet event (a replica
started, drained, died, replaced or killed), is written as one JSON line to
``events_path`` (``<run_dir>/autoscale.jsonl`` under ``up``) and handed to
``say`` (the display). Every ``heartbeat_every_s`` it sends a heartbeat as
role ``autoscale`` (replica ``autoscale-<role>``): the counts, the target,
the backlog, and the last decision with its reason in ``detail``, which
``rlvr-actor status`` and the live panel show.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import msgspec

from rlvr.actors.config import NatsConfig
from rlvr.actors.logs import get_logger
from rlvr.cli.autoscale.fleet import Fleet
from rlvr.cli.autoscale.observe import BusView
from rlvr.cli.autoscale.policy import AutoscaleConfig, Decision, Observation, PolicyState, decide
from rlvr.protocol import Heartbeat

log = get_logger("rlvr.autoscale")


class Autoscaler:
    def __init__(self, cfg: AutoscaleConfig, fleet: Fleet, *, run: str, nats_cfg: NatsConfig,
                 heartbeat_every_s: float = 2.0, events_path: Path | None = None,
                 say: Callable[[str], None] = lambda line: None) -> None:
        self.cfg = cfg
        self.fleet = fleet
        self.run = run
        self.nats_cfg = nats_cfg
        self.heartbeat_every_s = heartbeat_every_s
        self.events_path = events_path
        self.say = say
        self.last: Decision | None = None  # the last decision that changed something
        self.last_at = 0.0  # its wall time
        self.latest: Decision | None = None  # the last decision, whatever it was
        self.backlog: int | None = None
        self.error = ""  # the last failure to read the bus, or the loop's own crash
        self.counts = {"scale_ups": 0, "scale_downs": 0}
        self.started_at = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="autoscale", daemon=True)
        self._events_lock = threading.Lock()
        fleet.on_event = self._fleet_event

    @property
    def fatal(self) -> str:
        return self.fleet.fatal

    def start(self) -> Autoscaler:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    # --- the loop -------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            anyio.run(self._loop)
        except Exception as e:  # noqa: BLE001 - reported to the caller, who stops the run
            self.error = f"autoscaler stopped: {type(e).__name__}: {e}"
            self.fleet.fatal = self.fleet.fatal or self.error
            log.error("autoscale_crashed", error=repr(e))

    async def _loop(self) -> None:
        state = PolicyState()
        next_heartbeat = 0.0
        async with BusView(self.run, self.nats_cfg, self.fleet.role) as view:
            while not self._stop.is_set():
                self.fleet.reap()
                backlog = await view.backlog()
                self.backlog, self.error = backlog, view.last_error
                obs = Observation(time.monotonic(), backlog, self.fleet.views(view.beats))
                decision, state = decide(self.cfg, obs, state)
                self.latest = decision
                if not self.fleet.fatal:
                    self._apply(decision)
                if time.monotonic() >= next_heartbeat:
                    await view.publish(self._heartbeat())
                    next_heartbeat = time.monotonic() + self.heartbeat_every_s
                await anyio.to_thread.run_sync(self._stop.wait, self.cfg.interval_s)

    def _apply(self, d: Decision) -> None:
        for name in d.replace:
            self.fleet.replace(name, "no heartbeat within the policy's deadline")
        if d.action == "up":
            self.counts["scale_ups"] += 1
            self.fleet.start(d.target - d.current)
        elif d.action == "down":
            self.counts["scale_downs"] += 1
            for name in d.drain:
                self.fleet.drain(name)
        if d.action != "hold":
            self.last, self.last_at = d, time.time()
            self._record({"event": "decision", "action": d.action, "current": d.current, "target": d.target,
                          "backlog": self.backlog, "reason": d.reason, "drain": list(d.drain)})
            self.say(f"[autoscale] {self.fleet.role} {d.current} -> {d.target}: {d.reason}")

    def _fleet_event(self, kind: str, replica: str, detail: str) -> None:
        self._record({"event": kind, "replica": replica, "detail": detail})
        if kind in ("replaced", "killed"):
            self.say(f"[autoscale] {replica} {kind}: {detail}")

    def _record(self, rec: dict) -> None:
        rec = {"time": round(time.time(), 3), **rec}
        log.info("autoscale_" + rec["event"], **{k: v for k, v in rec.items() if k not in ("event", "time")})
        if self.events_path is not None:
            with self._events_lock, open(self.events_path, "a") as f:
                f.write(json.dumps(rec) + "\n")

    def _heartbeat(self) -> Heartbeat:
        d, f = self.latest, self.fleet
        gauges = {"replicas": float(len(f.serving)), "draining": float(len(f.draining)),
                  "target": float(d.target if d else len(f.serving)),
                  "min_replicas": float(self.cfg.min_replicas), "max_replicas": float(self.cfg.max_replicas)}
        if self.backlog is not None:
            gauges["backlog"] = float(self.backlog)
        last = self.last
        detail = (f"last change {time.strftime('%H:%M:%S', time.localtime(self.last_at))}: "
                  f"{last.action} {last.current} -> {last.target}: {last.reason}" if last else "no change yet")
        if self.error:
            detail += f"; reading the backlog failed: {self.error}"
        return Heartbeat(
            run=self.run, role="autoscale", replica=f"autoscale-{f.role}", host=socket.gethostname(),
            pid=os.getpid(), sent_at=time.time(), started_at=self.started_at,
            counters={**{k: float(v) for k, v in self.counts.items()},
                      **{k: float(v) for k, v in f.counts.items()}},
            gauges=gauges, alerts=[f.fatal] if f.fatal else [], detail=detail[:2000],
        )


def summary(scaler: Autoscaler) -> dict:
    """What the run's summary says of the scaler."""
    f = scaler.fleet
    return {"scale_ups": scaler.counts["scale_ups"], "scale_downs": scaler.counts["scale_downs"],
            **{f"replicas_{k}": v for k, v in f.counts.items()},
            "last_decision": msgspec.to_builtins(scaler.last) if scaler.last else None}
