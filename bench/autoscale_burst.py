"""Autoscaling a burst of slow verifications: fixed 1 replica, fixed N, and autoscaled 1..N.

    OMP_NUM_THREADS=1 python bench/autoscale_burst.py [--samples 160] [--group-size 1] [--program-s 1.5] [--max 4]
        [--setups fixed-1,fixed-N,auto,auto-kill,auto-interrupt] [--out bench/results/autoscale_burst.jsonl]

A real nats-server; the benchmark is the learner (it creates the topology) and
the rollout (it publishes the burst of Samples to ROLLOUTS at once, in group
messages of ``--group-size`` as a rollout publishes a task's group:
protocol/groups.py; 1 by default, as the figures in bench/results were
measured, so a message is a sample there). The
verifier replicas are real ``rlvr-actor --role verify`` processes, started by
the same ``Fleet`` the autoscaler uses. Each sample is a code task: a program
that waits ``--program-s`` seconds and then answers one stdin test, run by the
``code`` verifier in its sandbox (bubblewrap here). The programs wait rather
than compute, so a 2-core machine can hold more replicas than cores: this
measures the scaling, not the CPU.

Setups (each on a fresh run id):

- ``fixed-1`` / ``fixed-N``: that many replicas, warm before the burst;
- ``auto``: one warm replica and the autoscaler (min 1, max N);
- ``auto-kill``: the same, and the first replica is SIGKILLed as soon as the
  scaler starts its second (its messages come back after ``ack_wait``);
- ``auto-interrupt``: the same as ``auto``, and after the burst a trickle of
  samples keeps replicas holding work while they are drained; every drain is
  interrupted by a second SIGTERM the moment it starts.

Reported per setup: seconds from the first publish to the first replica the
scaler adds; the peak backlog (pending + ack pending of the ``verify``
durable, polled every 0.25 s: group messages, as the autoscaler counts it);
seconds to drain the burst (every sample's ScoredGroup stored); replica-seconds
used until then (sum over time of
replica processes running); seconds from the drain to being back at the
minimum; replica-seconds over the first ``--window`` seconds from the burst
(the burst and the quiet after it: what a fixed fleet pays for being sized for
the peak); and, against every sample published, how many were stored on SCORED
(must be each exactly once: ``lost`` and ``stored_twice`` 0, the latter counted
in group messages) and how many were published twice (a redelivered group
scored again; the server's duplicate window stores it once). One JSON line per
setup to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import anyio

from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.cli.autoscale.fleet import Fleet
from rlvr.cli.autoscale.policy import AutoscaleConfig
from rlvr.cli.autoscale.scaler import Autoscaler
from rlvr.cli.children import spawn_role
from rlvr.cli.natsserver import NatsServer
from rlvr.protocol import (Completion, Heartbeat, RunNames, Sample, SampleGroup, SamplingParams, ScoredGroup,
                           VerifierSpec, decode)

ACK_WAIT_S = 6.0


def program(wait_s: float) -> str:
    return f"```python\nimport time\ntime.sleep({wait_s})\nprint(int(input()) * 2)\n```"


def sample(run: str, i: int, text: str, group_size: int) -> Sample:
    k = i // group_size  # the task: each member its own test, so every sample is distinct work
    return Sample(
        run=run, task_id=f"b{k}", sample_index=i % group_size, group_id=f"b{k}", group_size=group_size,
        prompt_ids=[1, 2, 3],
        completion=Completion(ids=list(range(20)), logprobs=[-0.1] * 20), text=text, finish_reason="stop",
        policy_version=0, policy_version_max=0,
        verifier=VerifierSpec(name="code", params={"tests": [{"input": f"{i}\n", "output": f"{2 * i}\n"}]}),
        sampling=SamplingParams(), replica="bench",
    )


def groups_of(run: str, first: int, count: int, text: str, group_size: int) -> list[SampleGroup]:
    """``count`` group messages of ``group_size`` samples, numbered from sample ``first``."""
    out = []
    for k in range(count):
        members = [sample(run, first + k * group_size + i, text, group_size) for i in range(group_size)]
        out.append(SampleGroup(run, members[0].task_id, members))
    return out


def write_config(path: Path, run: str, url: str, wall_s: float) -> None:
    path.write_text(
        f'run = "{run}"\n'
        f'[nats]\nurl = "{url}"\n'
        f'[bus]\nstorage = "memory"\nheartbeat_every_s = 0.5\nack_wait_s = {ACK_WAIT_S}\n'
        '[verify]\npool_size = 2\nconcurrency = 2\nwarm_verifiers = []\n'
        f'[verify.sandbox.limits]\nwall_s = {wall_s}\n'
        '[observability]\nlog_level = "warning"\nlog_format = "json"\n'
        '[up]\nthreads_per_process = 1\n'
    )


class Watch:
    """Scored samples' arrivals (a core subscription sees every publish, duplicates included) and heartbeats."""

    def __init__(self) -> None:
        self.published: dict[str, int] = {}
        self.first_at: dict[str, float] = {}
        self.warm: set[str] = set()

    async def on_scored(self, msg) -> None:
        for s in decode(msg.data, ScoredGroup).items():
            self.published[s.sample_id] = self.published.get(s.sample_id, 0) + 1
            self.first_at.setdefault(s.sample_id, time.monotonic())

    async def on_status(self, msg) -> None:
        hb = decode(msg.data, Heartbeat)
        if hb.gauges.get("workers_alive", 0) >= 1 and hb.state == "running":
            self.warm.add(hb.replica)


async def run_setup(url: str, workdir: Path, setup: str, args) -> dict:
    run = f"burst-{setup}".replace("_", "-")
    cfg_path = workdir / f"{run}.toml"
    write_config(cfg_path, run, url, wall_s=args.program_s + 5)
    names = RunNames(run)
    bus = await Bus.connect(NatsConfig(url=url), BusConfig(storage="memory", ack_wait_s=ACK_WAIT_S), names, "bench")
    watch = Watch()
    log_dir = workdir / run
    log_dir.mkdir()
    fixed = {"fixed-1": 1, "fixed-N": args.max}.get(setup)
    events: list[dict] = []
    marks: dict[str, float] = {}

    def spawn(name: str):
        return spawn_role("verify", name, cfg_path, log_dir, threads=1)

    fleet = Fleet(spawn, role="verify", drain_deadline_s=60)
    scaler = None
    auto = AutoscaleConfig(enabled=True, min_replicas=1, max_replicas=args.max,
                           target_backlog_per_replica=args.target, scale_up_cooldown_s=args.cooldown,
                           scale_down_stabilization_s=args.stabilization, interval_s=0.5, dead_after_s=8.0)
    try:
        await bus.ensure_topology()
        await bus.nc.subscribe(names.scored, cb=watch.on_scored)
        await bus.nc.subscribe(names.status("verify"), cb=watch.on_status)
        fleet.start(fixed or 1)
        with anyio.fail_after(180):
            while len(watch.warm) < (fixed or 1):
                await anyio.sleep(0.1)
        if fixed is None:
            def on_event(kind: str, replica: str, detail: str) -> None:
                now = time.monotonic()
                events.append({"t": now, "event": kind, "replica": replica, "detail": detail})
                if kind == "started" and "first_added" not in marks and "burst" in marks:
                    marks["first_added"] = now
                    if setup == "auto-kill":  # SIGKILL the first replica while the scaler is adding one
                        first = fleet.serving.get("verify-0")
                        if first is not None:
                            first.kill_group()
                            marks["killed"] = now
                if kind == "draining" and setup == "auto-interrupt":
                    child = fleet.draining.get(replica, (None, 0))[0]
                    if child is not None:
                        child.signal(signal.SIGTERM)  # the second SIGTERM: the drain is cut short
                        marks.setdefault("interrupted", 0)
                        marks["interrupted"] += 1
            scaler = Autoscaler(auto, fleet, run=run, nats_cfg=NatsConfig(url=url), heartbeat_every_s=0.5,
                                events_path=log_dir / "autoscale.jsonl")
            inner = fleet.on_event
            fleet.on_event = lambda k, r, d: (inner(k, r, d), on_event(k, r, d))
            scaler.start()
        gs = args.group_size
        groups = groups_of(run, 0, args.samples // gs, program(args.program_s), gs)
        samples = [s for g in groups for s in g.samples]
        marks["burst"] = time.monotonic()
        for k in range(0, len(groups), 50):
            await bus.publish_many(names.rollouts, [(g, g.msg_id) for g in groups[k:k + 50]])
        trickle = groups_of(run, args.samples, args.trickle, program(args.program_s), gs) \
            if setup == "auto-interrupt" else []
        expected = {s.sample_id for s in samples} | {s.sample_id for g in trickle for s in g.samples}
        peak, timeline = 0, [(marks["burst"], len(fleet.running()))]  # (time, replica processes running)
        stream = names.stream("ROLLOUTS")
        trickled = 0
        with anyio.fail_after(900):
            while True:
                await anyio.sleep(0.25)
                now = time.monotonic()
                timeline.append((now, len(fleet.running())))
                ci = await bus.js.consumer_info(stream, "verify")
                peak = max(peak, (ci.num_pending or 0) + (ci.num_ack_pending or 0))
                if "drained" not in marks and all(s.sample_id in watch.published for s in samples):
                    marks["drained"] = max(watch.first_at[s.sample_id] for s in samples)
                if "drained" in marks and trickled < len(trickle) and now - marks.get("trickle_at", 0) > args.trickle_every:
                    g = trickle[trickled]
                    await bus.publish(names.rollouts, g, msg_id=g.msg_id)
                    trickled, marks["trickle_at"] = trickled + 1, now
                all_in = expected <= set(watch.published) and trickled == len(trickle)
                at_min = fixed is not None or (len(fleet.serving) == auto.min_replicas and not fleet.draining)
                if all_in and at_min and "at_min" not in marks:
                    marks["at_min"] = now
                if "at_min" in marks and now - marks["burst"] >= args.window:
                    break

        def replica_seconds(until: float) -> float:  # the running count integrated over the polls
            return sum(n * (t1 - t0) for (t0, n), (t1, _) in zip(timeline, timeline[1:]) if t1 <= until)

        replica_s = replica_seconds(marks["drained"])
        window_replica_s = replica_seconds(marks["burst"] + args.window)
        info = await bus.js.stream_info(names.stream("SCORED"))
        stored = info.state.messages
    finally:
        if scaler is not None:
            scaler.stop()
        for c in fleet.running():
            c.signal(signal.SIGTERM)
        for c in fleet.running():
            try:
                c.proc.wait(30)
            except Exception:  # noqa: BLE001
                c.kill_group()
        await bus.close()
    burst = marks["burst"]
    twice = sum(1 for sid in expected if watch.published.get(sid, 0) > 1)
    return {
        "setup": setup, "samples": args.samples, "group_size": args.group_size, "trickle": len(trickle),
        "program_s": args.program_s,
        "max_replicas": args.max, "cpus": os.cpu_count(),
        "first_replica_added_s": round(marks["first_added"] - burst, 2) if "first_added" in marks else None,
        "peak_backlog": peak,
        "drain_s": round(marks["drained"] - burst, 2),
        "replica_s": round(replica_s, 1),
        "window_s": args.window, "window_replica_s": round(window_replica_s, 1),
        "back_to_min_s": round(marks["at_min"] - marks["drained"], 1) if fixed is None else None,
        "stored": stored, "expected_messages": len(groups) + len(trickle), "expected": len(expected),
        "lost": len(expected - set(watch.published)), "stored_twice": max(0, stored - len(groups) - len(trickle)),
        "published_twice": twice,
        "replicas_started": fleet.counts["started"], "replicas_replaced": fleet.counts["replaced"],
        "killed_at_s": round(marks["killed"] - burst, 2) if "killed" in marks else None,
        "drains_interrupted": marks.get("interrupted", 0),
        "events": [{**e, "t": round(e["t"] - burst, 2)} for e in events],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=160)
    ap.add_argument("--group-size", type=int, default=1, help="samples per group message (divides --samples)")
    ap.add_argument("--program-s", type=float, default=1.5)
    ap.add_argument("--max", type=int, default=4)
    ap.add_argument("--target", type=int, default=8, help="autoscale.target_backlog_per_replica (group messages)")
    ap.add_argument("--cooldown", type=float, default=3.0, help="autoscale.scale_up_cooldown_s")
    ap.add_argument("--stabilization", type=float, default=8.0, help="autoscale.scale_down_stabilization_s")
    ap.add_argument("--trickle", type=int, default=12, help="auto-interrupt: group messages sent while draining")
    ap.add_argument("--trickle-every", type=float, default=1.0)
    ap.add_argument("--window", type=float, default=150.0,
                    help="seconds from the burst over which replica-seconds are also counted (the burst and the quiet after it)")
    ap.add_argument("--setups", default="fixed-1,fixed-N,auto,auto-kill,auto-interrupt")
    ap.add_argument("--out", default="bench/results/autoscale_burst.jsonl")
    args = ap.parse_args()
    if args.group_size < 1 or args.samples % args.group_size:
        ap.error(f"--group-size must divide --samples ({args.samples}), got {args.group_size}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlvr-burst-") as tmp, NatsServer(Path(tmp) / "nats") as srv:
        for setup in args.setups.split(","):
            row = anyio.run(run_setup, srv.url, Path(tmp), setup, args)
            rows.append(row)
            with open(args.out, "a") as f:
                f.write(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), **row}) + "\n")
            print(f"{setup:<15} first added {row['first_replica_added_s']}s  peak backlog {row['peak_backlog']}  "
                  f"drain {row['drain_s']}s  replica-s {row['replica_s']} (over {row['window_s']:.0f}s: {row['window_replica_s']})  back to min {row['back_to_min_s']}s  "
                  f"stored {row['stored']}/{row['expected_messages']} messages ({row['expected']} samples)  "
                  f"lost {row['lost']}  stored twice {row['stored_twice']}  "
                  f"re-scored {row['published_twice']}", flush=True)
    bad = [r["setup"] for r in rows if r["lost"] or r["stored_twice"]]
    if bad:
        print(f"VIOLATION: lost or stored twice in {bad}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
