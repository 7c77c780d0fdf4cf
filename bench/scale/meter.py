"""What the scale bench reads while the run goes, and what it makes of a window of readings.

A reading (``Meter.read``, about once a second) takes, without joining the run's work:

- each stream's state (``stream_info``: last sequence, messages and bytes held, its Raft leader) and
  each durable's (``consumer_info``: pending, ack pending, redelivered, and the learner's last
  delivered sequence with the time it was delivered);
- CPU seconds of every role's processes, of each nats-server and of this bench, and the bytes each
  nats-server wrote to storage (procs.py);
- each node's ``/varz`` and each client connection's bytes (``/connz``), and each store's size;
- the latest heartbeat of every replica (their nak, fault and retry counters).

``window`` turns the first and last reading of a window into rates. ``latencies`` reads SCORED
messages of a window back after it (SCORED keeps them: limits retention), and puts each beside its
timings: the task's creation (``finished_at - generate_s - queued_s``, the sample's own timings),
when the rollout published it, when SCORED stored its verdict (the stream's timestamp) and when the
learner was delivered it (``follow_learner``: the learn durable's last delivered sequence and the
server's time of that delivery, read every 0.2 s; a message is given the first such time at or past
its sequence, an upper bound within one poll).

Not here: starting anything (run.py), the report (report.py).
"""

from __future__ import annotations

import asyncio
import bisect
import os
import statistics
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import nats
from nats.js.errors import NotFoundError

from bench.scale import procs
from bench.scale.cluster import Cluster, Monitor
from rlvr.protocol import Heartbeat, RunNames, decode
from rlvr.protocol.codec import Message, MessageDecodeError

KINDS = ("TASKS", "ROLLOUTS", "SCORED")
DURABLES = {"TASKS": "rollout", "ROLLOUTS": "verify", "SCORED": "learn"}
# The publisher of each stream (whose connection's in_bytes is what it published) and its consumer.
PUBLISHER = {"TASKS": "learn", "ROLLOUTS": "rollout", "SCORED": "verify"}
HB_COUNTERS = ("naked", "faults", "bus_retries", "dead_lettered", "keep_alive_stalls", "redelivered_in_hand",
               "pull_failures", "settle_failures")


def unix(ts) -> float:
    """A JetStream timestamp (RFC 3339 with nanoseconds, or a datetime) as unix seconds."""
    if isinstance(ts, datetime):
        return ts.timestamp()
    text = str(ts).replace("Z", "+00:00")
    head, _, tail = text.partition(".")
    if tail:  # Python reads at most 6 digits of a fraction
        digits = len(tail) - len(tail.lstrip("0123456789"))
        text = f"{head}.{tail[:min(digits, 6)]}{tail[digits:]}"
    return datetime.fromisoformat(text).timestamp()


def _du(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


class Meter:
    def __init__(self, cluster: Cluster, run: str) -> None:
        self.cluster, self.names = cluster, RunNames(run)
        self.monitor = Monitor(cluster, run)
        self.heartbeats: dict[str, Heartbeat] = {}
        # Every poll of the learner's durable: (polled at, its last delivered SCORED seq, when that was delivered).
        self.deliveries: list[tuple[float, int, float]] = []
        self.nc = None
        self.js = None

    async def connect(self) -> None:
        self.nc = await nats.connect(self.cluster.urls.split(","), name="scale-bench-meter",
                                     max_reconnect_attempts=-1)
        self.js = self.nc.jetstream(timeout=20)

        async def on_heartbeat(msg) -> None:
            try:
                hb = decode(msg.data, Heartbeat)
            except MessageDecodeError:
                return
            self.heartbeats[hb.replica] = hb

        await self.nc.subscribe(self.names.status(), cb=on_heartbeat)

    async def close(self) -> None:
        if self.nc is not None:
            await self.nc.close()

    async def follow_learner(self, every_s: float = 0.2) -> None:
        """Until cancelled: the learn durable's last delivered sequence and its delivery time, every ``every_s``."""
        stream = self.names.stream("SCORED")
        while True:
            try:
                c = await self.js.consumer_info(stream, DURABLES["SCORED"])
            except (nats.errors.TimeoutError, TimeoutError):  # a busy server: this poll is missed, the next one counts
                await asyncio.sleep(every_s)
                continue
            if c.delivered and c.delivered.last_active:
                self.deliveries.append((time.time(), c.delivered.stream_seq, unix(c.delivered.last_active)))
            await asyncio.sleep(every_s)

    def running(self, replicas: list[str], since: float) -> list[str]:
        """Which of ``replicas`` have said "running" in a heartbeat sent after ``since``."""
        return [r for r in replicas if (hb := self.heartbeats.get(r)) is not None
                and hb.state == "running" and hb.sent_at >= since]

    async def topology_ready(self) -> bool:
        try:
            for kind in KINDS:
                await self.js.consumer_info(self.names.stream(kind), DURABLES[kind])
        except (NotFoundError, nats.errors.Error, TimeoutError):
            return False
        return True

    async def read(self, pids: dict[str, list[int]]) -> dict:
        t = time.time()
        streams, consumers = {}, {}
        for kind in KINDS:
            info = await self.js.stream_info(self.names.stream(kind))
            streams[kind] = {"last_seq": info.state.last_seq, "messages": info.state.messages,
                             "bytes": info.state.bytes,
                             "leader": info.cluster.leader if info.cluster is not None else None}
            c = await self.js.consumer_info(self.names.stream(kind), DURABLES[kind])
            consumers[kind] = {"pending": c.num_pending, "ack_pending": c.num_ack_pending,
                               "redelivered": c.num_redelivered,
                               "delivered_seq": c.delivered.stream_seq if c.delivered else 0,
                               "delivered_at": unix(c.delivered.last_active) if c.delivered and c.delivered.last_active
                               else None}
        dead = (await self.js.stream_info(self.names.stream("DEAD"))).state.last_seq
        nodes = self.cluster.pids()
        snap = procs.snapshot(set(nodes.values()))
        cpu = {role: snap.cpu_s(roots) for role, roots in pids.items()}
        cpu.update({name: snap.cpu_s([pid]) for name, pid in nodes.items()})
        cpu["bench"] = snap.ticks.get(os.getpid(), 0) / os.sysconf("SC_CLK_TCK")
        learner = self.heartbeats.get("learn-0")
        gauges = learner.gauges if learner is not None else {}
        hb: dict[str, Counter] = {}
        for replica, beat in self.heartbeats.items():
            hb.setdefault(beat.role, Counter()).update({k: beat.counters.get(k, 0.0) for k in HB_COUNTERS})
        return {
            "t": t, "streams": streams, "consumers": consumers, "cpu": cpu, "dead_seq": dead,
            "written": {name: snap.written.get(pid, 0) for name, pid in nodes.items()},
            "varz": self.monitor.varz(), "conns": self.monitor.connections(),
            "store": {name: _du(path) for name, path in self.cluster.stores().items()},
            "hb": {role: dict(c) for role, c in hb.items()},
            "learner": {"outstanding_tasks": gauges.get("outstanding_tasks", 0.0), "held": gauges.get("held", 0.0)},
            "mem_available": mem_available(), "machine_ticks": _machine_ticks(),
        }


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine, every process of every user (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _role_of(replica: str) -> str:
    return replica.split("-", 1)[0]


def window(readings: list[dict]) -> dict:
    """Rates over a window of readings (first to last)."""
    a, b = readings[0], readings[-1]
    dt = b["t"] - a["t"]
    out: dict = {"seconds": round(dt, 1), "streams": {}, "cpu_cores": {}, "nodes": {}, "roles": {}}
    for kind in KINDS:
        sa, sb = a["streams"][kind], b["streams"][kind]
        held = [(r["streams"][kind]["bytes"], r["streams"][kind]["messages"]) for r in readings
                if r["streams"][kind]["messages"] > 0]
        mean_size = sum(x for x, _ in held) / sum(n for _, n in held) if held else 0.0
        msgs = sb["last_seq"] - sa["last_seq"]
        ca, cb = a["consumers"][kind], b["consumers"][kind]
        wire = {}
        for who in ("in", "out"):
            role = PUBLISHER[kind] if who == "in" else DURABLES[kind]
            wire[who] = sum(c[f"{who}_bytes"] - a["conns"].get(r, {}).get(f"{who}_bytes", 0)
                            for r, c in b["conns"].items() if _role_of(r) == role) / dt
        # The samples' streams: what their publishers sent (a work queue holds too few messages at a time
        # for a mean size); TASKS: tasks x their mean stored size (the learner's connection also carries its acks).
        stored = msgs * mean_size / dt
        out["streams"][kind] = {
            "msgs_s": msgs / dt, "mean_msg_bytes": mean_size, "stored_bytes_s": stored,
            "bytes_s": stored if kind == "TASKS" else wire["in"],
            "delivered_msgs_s": (cb["delivered_seq"] - ca["delivered_seq"]) / dt,
            "published_wire_bytes_s": wire["in"], "delivered_wire_bytes_s": wire["out"],
            "leader": sb["leader"], "held_bytes": sb["bytes"], "held_growth_bytes_s": (sb["bytes"] - sa["bytes"]) / dt,
            "pending_start": ca["pending"], "pending_end": cb["pending"],
            "ack_pending_end": cb["ack_pending"], "redelivered": cb["redelivered"] - ca["redelivered"],
        }
    for who, cs in b["cpu"].items():
        out["cpu_cores"][who] = (cs - a["cpu"].get(who, 0.0)) / dt
    for name in b["varz"]:
        va, vb = a["varz"][name], b["varz"][name]
        out["nodes"][name] = {
            "in_bytes_s": (vb["in_bytes"] - va["in_bytes"]) / dt, "out_bytes_s": (vb["out_bytes"] - va["out_bytes"]) / dt,
            "disk_write_bytes_s": (b["written"][name] - a["written"][name]) / dt,
            "store_bytes": b["store"][name], "store_growth_bytes_s": (b["store"][name] - a["store"][name]) / dt,
            "mem": vb["mem"], "slow_consumers": vb["slow_consumers"] - va["slow_consumers"],
            "leads": [k for k in KINDS if b["streams"][k]["leader"] == name],
        }
    for role, counters in b["hb"].items():
        before = a["hb"].get(role, {})
        out["roles"][role] = {k: v - before.get(k, 0.0) for k, v in counters.items()}
    out["mem_available_min"] = min(r["mem_available"] for r in readings)
    out["dead_letters"] = b["dead_seq"] - a["dead_seq"]
    out["learner"] = {"outstanding_tasks_max": max(r["learner"]["outstanding_tasks"] for r in readings),
                      "held_max": max(r["learner"]["held"] for r in readings)}
    (busy_a, total_a), (busy_b, total_b) = a["machine_ticks"], b["machine_ticks"]
    out["machine_busy_share"] = (busy_b - busy_a) / max(1, total_b - total_a)
    return out


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


async def latencies(meter: Meter, readings: list[dict], cap: int) -> dict:
    """Read back up to ``cap`` SCORED messages stored during the window, evenly spaced, and time them."""
    first = readings[0]["streams"]["SCORED"]["last_seq"] + 1
    last = readings[-1]["streams"]["SCORED"]["last_seq"]
    # (polled at, delivered seq, delivered at), in poll order: the delivered sequence only grows.
    polls = sorted(meter.deliveries + [
        (r["t"], r["consumers"]["SCORED"]["delivered_seq"], r["consumers"]["SCORED"]["delivered_at"])
        for r in readings if r["consumers"]["SCORED"]["delivered_at"] is not None])
    seqs = [p[1] for p in polls]
    brackets: list[float] = []
    if last < first:
        return {"messages_read": 0}
    step = max(1, (last - first + 1) // cap)
    stages: dict[str, list[float]] = {k: [] for k in ("queued", "generate", "to_scored", "to_learner", "bus",
                                                      "end_to_end")}
    sizes, samples, tokens, unread = [], [], [], Counter()
    stream = meter.names.stream("SCORED")
    for seq in range(first, last + 1, step):
        try:
            raw = await meter.js.get_msg(stream, seq)
        except NotFoundError:
            unread["gone"] += 1
            continue
        try:
            msg = decode(raw.data, Message)
        except MessageDecodeError:
            unread["undecodable"] += 1
            continue
        # A ScoredGroup carries its samples, a Scored one; read either, so the bench follows the wire.
        members = getattr(msg, "samples", None) or ([msg.sample] if hasattr(msg, "sample") else [])
        if not members:  # a body kept elsewhere (a reference): nothing here to time
            unread[type(msg).__name__] += 1
            continue
        s = members[0]
        stored = unix(raw.time)
        created = s.timings.finished_at - s.timings.generate_s - s.timings.queued_s
        sizes.append(len(raw.data))
        samples.append(len(members))
        tokens.extend(len(m.completion.ids) for m in members)
        stages["queued"].append(s.timings.queued_s)
        stages["generate"].append(s.timings.generate_s)
        stages["to_scored"].append(stored - s.timings.finished_at)
        # The first poll that saw this message delivered: it went at or before that poll's delivery time,
        # and after the poll before it (which had not seen it).
        i = bisect.bisect_left(seqs, seq)
        if i < len(polls):
            delivered = polls[i][2]
            if i > 0:
                brackets.append(delivered - polls[i - 1][0])
            stages["to_learner"].append(max(0.0, delivered - stored))
            stages["bus"].append(delivered - s.timings.finished_at)
            stages["end_to_end"].append(delivered - created)
    return {
        "messages_read": len(sizes), "every": step, "unread": dict(unread),
        "samples_per_msg": statistics.fmean(samples) if samples else 0.0,
        "mean_msg_bytes": statistics.fmean(sizes) if sizes else 0.0,
        "tokens_mean": statistics.fmean(tokens) if tokens else 0.0,
        "tokens_median": statistics.median(tokens) if tokens else 0.0,
        "tokens_max": max(tokens, default=0),
        "bytes_per_token": sum(sizes) / sum(tokens) if tokens else 0.0,
        # How wide the interval a message's delivery is known to lie in was (the resolution of "to_learner").
        "delivery_bracket_p50_s": _pct(brackets, 0.5),
        "stages": {k: {"p50": _pct(v, 0.5), "p90": _pct(v, 0.9), "p99": _pct(v, 0.99), "n": len(v)}
                   for k, v in stages.items()},
    }
