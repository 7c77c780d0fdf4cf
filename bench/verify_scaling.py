"""Verifier scaling: do two replicas score a CPU-bound math workload ~2x as fast as one?

    OMP_NUM_THREADS=1 python bench/verify_scaling.py [--samples 160] [--repeats 2] [--group-size 1]

It starts a real nats-server, then for 1 and then 2 replicas of
``rlvr-actor --role verify`` (each with ONE worker process, so a replica is
one CPU's worth of verification) on a fresh run: it waits until every replica
reports a warm pool in its heartbeat, publishes the same Sample set to the
run's rollouts subject in group messages of ``--group-size`` (``SampleGroup``,
as a rollout publishes a task's group: protocol/groups.py; 1 by default, as
the figures in bench/results were measured), and times until every sample has
arrived scored in a ``ScoredGroup``.
The replicas share the durable ``verify`` consumer, so the work spreads by
itself. The workload is symbolic math: expanded polynomials of degree 9-11
against their factored gold answer, every one distinct (no cache helps).

The figure is the best of ``--repeats`` timings per replica count (other
load on a shared 2-core machine only ever slows a run down). The target is
a speed-up of at least 1.6x on a 2-core machine. Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.cli.natsserver import NatsServer
from rlvr.protocol import (Completion, Heartbeat, RunNames, Sample, SampleGroup, SamplingParams, ScoredGroup,
                           VerifierSpec, decode)


def workload(n: int) -> list[tuple[str, str]]:
    """(response, gold) pairs: an expanded polynomial vs its factored form."""
    import sympy

    x = sympy.Symbol("x")
    cases = []
    for i in range(n):
        a, degree = 2 + i // 3, 9 + i % 3
        expanded = sympy.latex(sympy.expand((x + a) ** degree * (x - 1)))
        cases.append((f"Expanding, the answer is \\boxed{{{expanded}}}", f"(x+{a})^{{{degree}}}(x-1)"))
    return cases


def sample(run: str, i: int, response: str, gold: str, group_size: int) -> Sample:
    k = i // group_size  # the task: group_size distinct cases each
    return Sample(
        run=run,
        task_id=f"t{k}",
        sample_index=i % group_size,
        group_id=f"t{k}",
        group_size=group_size,
        prompt_ids=[1, 2, 3],
        completion=Completion(ids=list(range(20)), logprobs=[-0.1] * 20),
        text=response,
        finish_reason="stop",
        policy_version=0,
        policy_version_max=0,
        verifier=VerifierSpec(name="math", params={"gold": gold}),
        sampling=SamplingParams(),
        replica="bench",
    )


def tree_cpu_s(roots: list[int]) -> float:
    """User + system CPU seconds of ``roots`` and all their descendants (Linux /proc)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))  # ppid, utime+stime
    tree, frontier = set(roots), list(roots)
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _) in stats.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier += children
    return sum(stats[pid][1] for pid in tree if pid in stats) / os.sysconf("SC_CLK_TCK")


def write_config(path: Path, run: str, url: str) -> None:
    path.write_text(
        f'run = "{run}"\n'
        f'[nats]\nurl = "{url}"\n'
        '[bus]\nstorage = "memory"\nheartbeat_every_s = 0.5\n'
        '[verify]\npool_size = 1\nconcurrency = 2\nwarm_verifiers = ["math"]\n'
        '[observability]\nlog_level = "warning"\nlog_format = "json"\n'
    )


async def measure(
    url: str, run: str, replicas: list[str], cases: list[tuple[str, str]], pids: list[int], group_size: int
) -> tuple[float, dict, float]:
    """Seconds from the first publish until every sample is scored, samples
    scored per replica, and the CPU seconds the replicas used meanwhile."""
    names = RunNames(run)
    bus = await Bus.connect(NatsConfig(url=url), BusConfig(storage="memory"), names, "bench")
    scored: set[str] = set()
    warm: set[str] = set()
    all_scored = anyio.Event()
    all_warm = anyio.Event()
    outcomes: dict[str, int] = {}
    split: dict[str, int] = {}

    async def on_scored(msg) -> None:
        for s in decode(msg.data, ScoredGroup).items():
            if s.sample_id not in scored:
                outcomes[s.verdict.outcome] = outcomes.get(s.verdict.outcome, 0) + 1
                split[s.replica] = split.get(s.replica, 0) + 1
            scored.add(s.sample_id)
        if len(scored) == len(cases):
            all_scored.set()

    async def on_status(msg) -> None:
        hb = decode(msg.data, Heartbeat)
        if hb.gauges.get("workers_alive", 0) >= 1:
            warm.add(hb.replica)
        if warm >= set(replicas):
            all_warm.set()

    try:
        await bus.ensure_topology()
        await bus.nc.subscribe(names.scored, cb=on_scored)
        await bus.nc.subscribe(names.status("verify"), cb=on_status)
        with anyio.fail_after(180):
            await all_warm.wait()
        samples = [sample(run, i, r, g, group_size) for i, (r, g) in enumerate(cases)]
        groups = [SampleGroup(run, samples[k].task_id, samples[k:k + group_size])
                  for k in range(0, len(samples), group_size)]
        cpu_before = tree_cpu_s(pids)
        started = time.perf_counter()
        for g in groups:
            await bus.publish(names.rollouts, g, msg_id=g.msg_id)
        with anyio.fail_after(600):
            await all_scored.wait()
        elapsed = time.perf_counter() - started
        cpu = tree_cpu_s(pids) - cpu_before
    finally:
        await bus.close()
    if outcomes.get("ok", 0) != len(cases):
        raise RuntimeError(f"expected every sample judged ok, got {outcomes}")
    return elapsed, split, cpu


def run_once(url: str, workdir: Path, replicas: int, cases, tag: str, group_size: int) -> tuple[float, dict, float]:
    run = f"scale-{tag}-{replicas}r"
    cfg = workdir / f"{run}.toml"
    write_config(cfg, run, url)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    ids = [f"{run}-v{i}" for i in range(replicas)]
    procs = []
    for rid in ids:
        log = open(workdir / f"{rid}.log", "wb")  # noqa: SIM115 (handed to the child)
        argv = [sys.executable, "-m", "rlvr.cli", "--role", "verify", "--config", str(cfg), "--replica", rid]
        procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env))
        log.close()
    try:
        return anyio.run(measure, url, run, ids, cases, [p.pid for p in procs], group_size)
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=160)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=1, help="samples per group message (divides --samples)")
    args = ap.parse_args()
    if args.group_size < 1 or args.samples % args.group_size:
        ap.error(f"--group-size must divide --samples ({args.samples}), got {args.group_size}")
    cases = workload(args.samples)
    timings: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-") as tmp, NatsServer(Path(tmp) / "nats") as srv:
        for r in range(args.repeats):
            for replicas in (1, 2):
                t, split, cpu = run_once(srv.url, Path(tmp), replicas, cases, tag=str(r), group_size=args.group_size)
                timings[replicas].append(t)
                # Cores the replicas actually got: well under `replicas` means
                # other load on the machine, not the bus, limited the run.
                print(f"repeat {r}: {replicas} replica(s): {args.samples} samples in {t:.2f}s "
                      f"({args.samples / t:.1f} samples/s), per replica {sorted(split.values())}, "
                      f"CPU {cpu:.1f}s = {cpu / t:.2f} cores busy", flush=True)
    best = {k: min(v) for k, v in timings.items()}
    speedup = best[1] / best[2]
    print(f"speed-up with 2 replicas: {speedup:.2f}x (target >= 1.6x on {os.cpu_count()} cores)")
    print(json.dumps({"samples": args.samples, "group_size": args.group_size, "cpus": os.cpu_count(), "timings_s": timings,
                      "best_s": best, "speedup": round(speedup, 3), "target": 1.6, "pass": speedup >= 1.6}))
    return 0 if speedup >= 1.6 else 1


if __name__ == "__main__":
    sys.exit(main())
