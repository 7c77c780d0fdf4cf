"""The replicas one autoscaler runs as child processes: start, drain, replace, reap.

A drained replica gets SIGTERM: it stops pulling, finishes or naks what it
holds and exits 0 (``rlvr.actors.runtime``). A second request to drain the
same replica is ignored (a second SIGTERM would cut its drain short: the
role then naks what it holds, which is safe but slower). A replica that has
not exited ``drain_deadline_s`` after its SIGTERM is killed, and its messages
come back after ``ack_wait``. A dead replica (exited, or silent past the
policy's deadline) is replaced by a new one with a new name, so that two
processes never share a log file or a heartbeat subject.

A replica that exits non-zero before its first heartbeat counts as a failed
start; ``max_start_failures`` in a row (a bad config, a plug-in that does
not import) stop the replacing and set ``fatal``: the caller stops with it
rather than start replicas forever.

Thread-safe: the scaler's thread changes the fleet while the caller's thread
reads ``children()`` to draw and, at the end, to stop them.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable

from rlvr.cli.autoscale.policy import ReplicaView
from rlvr.cli.children import Child
from rlvr.protocol import Heartbeat


class Fleet:
    def __init__(self, spawn: Callable[[str], Child], *, role: str = "verify", first_index: int = 0,
                 drain_deadline_s: float = 60.0, max_start_failures: int = 3,
                 on_event: Callable[[str, str, str], None] = lambda kind, replica, detail: None) -> None:
        self._spawn = spawn
        self.role = role
        self._next = first_index
        self.drain_deadline_s = drain_deadline_s
        self.max_start_failures = max_start_failures
        self.on_event = on_event
        self._lock = threading.Lock()
        self.serving: dict[str, Child] = {}
        self.draining: dict[str, tuple[Child, float]] = {}  # name -> (child, monotonic time of its SIGTERM)
        self.exited: list[Child] = []
        self.heard: set[str] = set()  # replicas that sent at least one heartbeat
        self.start_failures = 0
        self.fatal = ""
        self.counts = {"started": 0, "drained": 0, "replaced": 0, "died": 0, "killed": 0}

    # --- what the caller's thread reads ------------------------------------------------

    def children(self) -> list[Child]:
        with self._lock:
            return [*self.serving.values(), *(c for c, _ in self.draining.values()), *self.exited]

    def running(self) -> list[Child]:
        with self._lock:
            return [*self.serving.values(), *(c for c, _ in self.draining.values())]

    # --- what the scaler does ------------------------------------------------------------

    def start(self, k: int = 1) -> list[str]:
        names = []
        for _ in range(k):
            name = f"{self.role}-{self._next}"
            self._next += 1
            child = self._spawn(name)
            with self._lock:
                self.serving[name] = child
            self.counts["started"] += 1
            self.on_event("started", name, f"pid {child.proc.pid}")
            names.append(name)
        return names

    def drain(self, name: str) -> None:
        with self._lock:
            child = self.serving.pop(name, None)
            if child is None:
                return  # already draining or gone: never signalled twice
            self.draining[name] = (child, time.monotonic())
        child.signal(signal.SIGTERM)
        self.on_event("draining", name, "SIGTERM: stops pulling, finishes or naks what it holds")

    def replace(self, name: str, why: str) -> str | None:
        """Kill a serving replica that has gone silent (or exited) and start another."""
        with self._lock:
            child = self.serving.pop(name, None)
        if child is None:
            return None
        if child.proc.poll() is None:
            child.kill_group()
            child.proc.wait()
            self.counts["killed"] += 1
        with self._lock:
            self.exited.append(child)
        self.counts["replaced"] += 1
        self.on_event("replaced", name, why)
        if self.fatal:
            return None
        return self.start()[0]

    def reap(self) -> None:
        """Collect exited children: drained ones are done; serving ones died and are replaced."""
        now = time.monotonic()
        with self._lock:
            draining = list(self.draining.items())
            serving = list(self.serving.items())
        for name, (child, since) in draining:
            rc = child.proc.poll()
            if rc is None and now - since > self.drain_deadline_s:
                child.kill_group()
                rc = child.proc.wait()
                self.counts["killed"] += 1
                self.on_event("killed", name, f"still draining {self.drain_deadline_s:.0f}s after SIGTERM")
            if rc is not None:
                with self._lock:
                    self.draining.pop(name, None)
                    self.exited.append(child)
                self.counts["drained"] += 1
                self.on_event("drained", name, f"exited with {rc}")
        for name, child in serving:
            rc = child.proc.poll()
            if rc is None:
                continue
            self.counts["died"] += 1
            if name not in self.heard and rc != 0:
                self.start_failures += 1
                if self.start_failures >= self.max_start_failures:
                    self.fatal = (f"{self.start_failures} {self.role} replicas in a row exited before their first "
                                  f"heartbeat (last: {name}, exit {rc}); see {child.log_path}")
            self.replace(name, f"exited with {rc} after {now - child.started_at:.1f}s")

    def views(self, beats: dict[str, tuple[Heartbeat, float]]) -> tuple[ReplicaView, ...]:
        """The policy's view of every replica this fleet runs, from the heartbeats heard."""
        now = time.monotonic()
        with self._lock:
            entries = [(n, c, False) for n, c in self.serving.items()]
            entries += [(n, c, True) for n, (c, _) in self.draining.items()]
        out = []
        for name, child, draining in entries:
            hb, heard_at = beats.get(name, (None, None))
            if hb is not None and name not in self.heard:
                self.heard.add(name)
                self.start_failures = 0  # a replica came up: the config is fine
            # A heartbeat is untrusted input too: a non-finite or negative gauge reads as absent.
            g = {k: v for k, v in (hb.gauges if hb is not None else {}).items() if math.isfinite(v) and v >= 0}
            size = g.get("pool_size") or 0.0
            out.append(ReplicaView(
                name=name,
                started_s_ago=now - child.started_at,
                heartbeat_age_s=None if heard_at is None else now - heard_at,
                draining=draining or (hb is not None and hb.state == "draining"),
                busy=min(1.0, g.get("workers_busy", 0.0) / size) if size else None,
                in_flight=max(0, hb.in_flight) if hb is not None else 0,
                samples_per_s=g.get("samples_per_s", 0.0),
                latency_p99_s=g.get("latency_p99_s", 0.0),
            ))
        return tuple(out)
