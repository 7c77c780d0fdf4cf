"""Tokens/s of a rollout replica through the actor and the bus, against the engine called directly.

One run, same prompts, group size, sampling and concurrency on both paths:

- **direct**: ``Engine.generate`` in this process (``engine_direct.measure_direct``);
- **bus**: an embedded nats-server and one ``rlvr-actor --role rollout``
  process with the same engine config (``max_inflight_tasks`` = concurrency);
  this process publishes the Tasks to ``rlvr.<run>.tasks`` and counts the
  Samples landing on ``rlvr.<run>.rollouts`` (the ROLLOUTS stream's subject),
  one ``SampleGroup`` message per task (protocol/groups.py).
  The clock runs from the first task published to the last sample received.

Both engines stay up for the whole run and are warmed up first; the paths
alternate for ``--rounds`` rounds in ABBA order, so that load from other
processes on the machine hits both alike. The overhead is ``1 - bus / direct`` on the median
tokens/s (and, per round, paired with that round's direct run). On a shared
host wall-clock figures swing with other load, so the CPU seconds per token
of every process of the run (this one, the replica and its engine processes,
nats-server) are reported too: ``cpu_overhead_median``.

    python bench/rollout_overhead.py --engine hf --groups 48 --n 8 --max-tokens 32 --concurrency 8 --rounds 3

Without ``--model`` a tiny model is built in a temporary folder. It does not
measure verification or the learner.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

import anyio  # noqa: E402
import msgspec  # noqa: E402

from engine_direct import _config, arithmetic_prompts, measure_direct  # noqa: E402 (bench/ is sys.path[0])
from rlvr.cli.natsserver import NatsServer  # noqa: E402
from rlvr.protocol import Heartbeat, RunNames, SampleGroup, SamplingParams, Task, VerifierSpec, decode, encode  # noqa: E402
from rlvr.rollout.engines import make_engine  # noqa: E402

RUN = "bench"
REPLICA = "bench-rollout"


class BusResult(msgspec.Struct, frozen=True):
    groups: int
    samples: int
    tokens: int
    seconds: float
    tokens_per_s: float
    samples_per_s: float


def _tree_cpu_s() -> float:
    """User + system CPU seconds of this process and all its descendants (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # exited meanwhile
            continue
        f = raw[raw.rindex(")") + 2 :].split()
        stats[int(entry)] = (int(f[1]), (int(f[11]) + int(f[12])) / tick)  # ppid, utime + stime
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _) in stats.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(stats[pid][1] for pid in tree if pid in stats)


def _tasks(prompts: list[str], n: int, sampling: SamplingParams, tag: str) -> list[Task]:
    return [
        Task(run=RUN, task_id=f"{tag}-{i}", dataset="bench", index=i, prompt=p, n=n, sampling=sampling,
             verifier=VerifierSpec("exact", {"gold": "0"}), policy_version=0, created_at=time.time())
        for i, p in enumerate(prompts)
    ]


async def measure_bus(nc, tasks: list[Task], timeout_s: float) -> BusResult:
    """Publish ``tasks`` and wait for all their samples on the rollouts subject."""
    import asyncio

    names = RunNames(RUN)
    js = nc.jetstream(timeout=30)
    wanted = {t.task_id for t in tasks}
    sub = await nc.subscribe(names.rollouts)
    samples = tokens = 0
    try:
        start = time.perf_counter()
        await asyncio.gather(*(
            js.publish(names.tasks, encode(t), headers={"Nats-Msg-Id": t.task_id}) for t in tasks
        ))
        with anyio.fail_after(timeout_s):
            async for msg in sub.messages:
                g = decode(msg.data, SampleGroup)
                if g.task_id in wanted:  # each task's group once (a core subscription sees a republish too)
                    wanted.discard(g.task_id)
                    samples += len(g.samples)
                    tokens += sum(len(s.completion.ids) for s in g.samples)
                    if not wanted:
                        break
        seconds = time.perf_counter() - start
    finally:
        await sub.unsubscribe()
    return BusResult(len(tasks), samples, tokens, seconds, tokens / seconds, samples / seconds)


async def _wait_running(nc, timeout_s: float) -> None:
    sub = await nc.subscribe(f"{RunNames(RUN).prefix}.status.>")
    try:
        with anyio.fail_after(timeout_s):
            async for msg in sub.messages:
                if decode(msg.data, Heartbeat).state == "running":
                    return
    finally:
        await sub.unsubscribe()


def _start_replica(tmp: Path, url: str, engine_cfg, concurrency: int, threads: int) -> subprocess.Popen:
    cfg = {
        "run": RUN,
        "bus": {"ack_wait_s": 120.0},
        "observability": {"log_format": "json"},
        "rollout": {"engine": msgspec.to_builtins(engine_cfg), "max_inflight_tasks": concurrency},
    }
    (tmp / "rollout.json").write_bytes(msgspec.json.encode(cfg))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), RLVR_RUN_DIR=str(tmp))
    with open(tmp / "replica.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "rlvr.cli", "--role", "rollout", "--config", str(tmp / "rollout.json"),
             "--nats", url, "--replica", REPLICA],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )


async def _run(args: argparse.Namespace, tmp: Path) -> dict:
    import nats

    model = args.model
    if model is None and args.engine != "trivial":
        from rlvr.learner.example.tiny_model import build_tiny_model

        model = str(build_tiny_model(tmp / "model"))
    engine_cfg = _config(args, model or "")
    sampling = SamplingParams(temperature=1.0, max_tokens=args.max_tokens, seed=args.seed)
    prompts = arithmetic_prompts(args.groups, args.seed)
    with NatsServer(tmp / "nats") as server:
        # The learner owns the topology (a replica only checks it): create it as `rlvr-actor init` does.
        from rlvr.actors.bus import Bus
        from rlvr.actors.config import BusConfig, NatsConfig

        owner = await Bus.connect(NatsConfig(url=server.url), BusConfig(), RunNames(RUN), "bench")
        await owner.ensure_topology()
        await owner.close()
        replica = _start_replica(tmp, server.url, engine_cfg, args.concurrency, args.threads)
        nc = await nats.connect(server.url)
        engine = make_engine(engine_cfg)
        try:
            await _wait_running(nc, timeout_s=120)
            await engine.start()
            # Warm-up on both paths (the first bus round-trip also waits out the replica's engine start).
            await measure_direct(engine, prompts[: args.concurrency], args.n, sampling, args.concurrency)
            await measure_bus(nc, _tasks(prompts[: args.concurrency], args.n, sampling, "warm"), timeout_s=600)
            rounds = []
            for r in range(args.rounds):
                # ABBA order: a drift in background load does not favour either path.
                for path in ("direct", "bus") if r % 2 == 0 else ("bus", "direct"):
                    cpu0 = _tree_cpu_s()
                    if path == "direct":
                        direct = await measure_direct(engine, prompts, args.n, sampling, args.concurrency)
                        direct_cpu = _tree_cpu_s() - cpu0
                    else:
                        bus = await measure_bus(nc, _tasks(prompts, args.n, sampling, f"r{r}"), timeout_s=600)
                        bus_cpu = _tree_cpu_s() - cpu0
                rounds.append({"direct": msgspec.to_builtins(direct), "bus": msgspec.to_builtins(bus),
                               "direct_cpu_s": round(direct_cpu, 3), "bus_cpu_s": round(bus_cpu, 3)})
                print(json.dumps({"round": r, "direct_tokens_per_s": round(direct.tokens_per_s, 1),
                                  "bus_tokens_per_s": round(bus.tokens_per_s, 1),
                                  "direct_cpu_s": round(direct_cpu, 3), "bus_cpu_s": round(bus_cpu, 3),
                                  "direct_tokens": direct.tokens, "bus_tokens": bus.tokens}), flush=True)
        finally:
            await engine.close()
            await nc.close()
            replica.terminate()
            replica.wait(30)
    direct_tps = statistics.median(x["direct"]["tokens_per_s"] for x in rounds)
    bus_tps = statistics.median(x["bus"]["tokens_per_s"] for x in rounds)
    return {
        "engine": args.engine, "groups": args.groups, "n": args.n, "max_tokens": args.max_tokens,
        "concurrency": args.concurrency, "rounds": args.rounds, "threads": args.threads,
        "direct_tokens_per_s_median": round(direct_tps, 1), "bus_tokens_per_s_median": round(bus_tps, 1),
        "overhead": round(1.0 - bus_tps / direct_tps, 4),
        # Each round's bus run against its own direct run (robust to slow drifts in load).
        "overhead_paired_median": round(statistics.median(
            1.0 - x["bus"]["tokens_per_s"] / x["direct"]["tokens_per_s"] for x in rounds), 4),
        # CPU seconds per token of every process in the run (this one, the replica
        # with its engine processes, nats-server): insensitive to other load on the host.
        "cpu_overhead_median": round(statistics.median(
            (x["bus_cpu_s"] / x["bus"]["tokens"]) / (x["direct_cpu_s"] / x["direct"]["tokens"]) - 1.0
            for x in rounds), 4),
        "per_round": rounds,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", choices=["vllm", "hf", "trivial"], default="hf")
    p.add_argument("--model", default=None)
    p.add_argument("--groups", type=int, default=48)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads, in this process and the replica")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        result = anyio.run(_run, args, Path(tmp))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
