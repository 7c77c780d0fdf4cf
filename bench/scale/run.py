"""The scale bench's ladder: a 3-node R3 cluster, the real roles on it, and more rollout replicas level
by level until the bus stops keeping up.

    .venv/bin/python -m bench.scale            # the full ladder, at most ~14 minutes
    .venv/bin/python -m bench.scale --quick    # 2 short levels, for development (~2-3 minutes)

Order: the cluster (cluster.py), the dry learner (it creates the R3 topology), the verifiers, then for
each level of ``--rollouts`` the replicas it adds, a warm-up, and a window of readings once a second
(meter.py), after which SCORED messages of the window are read back for their latencies. The ladder
stops early when the run keeps less than ``SATURATED`` of the tokens the replicas offer at two levels in
a row, when the next level's processes would not fit in memory, or when ``--budget-s`` would run out.
Every role process is started and stopped by PID (``bench.chaos.skeleton``).

Writes ``bench/results/scale.json`` (every level, every rate) and, through report.py,
``bench/results/scale.md`` and ``scale.png``.

Not here: what a reading holds (meter.py), the tables and the picture (report.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.scale import report
from bench.scale.cluster import Cluster
from bench.scale.fleet import RUN, Fleet, Shape
from bench.scale.meter import Meter, latencies, mem_available, window

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
SATURATED = 0.8  # a level keeps less than this share of the offered tokens: the bus is behind
ROLE_RSS_BYTES = 300 << 20  # what one more role process may take (a rollout replica holds ~120 MB)
LATENCY_READS = 150  # SCORED messages read back per level


class BenchFailedError(RuntimeError):
    pass


async def _wait(what: str, pred, timeout_s: float, fleet: Fleet) -> None:
    deadline = time.monotonic() + timeout_s
    while not await pred():
        if exits := fleet.exited():
            name, code = exits[0]
            raise BenchFailedError(f"{name} exited {code} while waiting for {what}:\n{fleet.log_tail(name)}")
        if time.monotonic() > deadline:
            raise BenchFailedError(f"{what}: not after {timeout_s:.0f}s")
        await asyncio.sleep(0.25)


async def _running(meter: Meter, fleet: Fleet, replicas: list[str], since: float, timeout_s: float) -> None:
    async def ok() -> bool:
        return len(meter.running(replicas, since)) == len(replicas)

    await _wait(f"{', '.join(replicas)} running", ok, timeout_s, fleet)


async def _window(meter: Meter, fleet: Fleet, seconds: float) -> list[dict]:
    """Readings about once a second for ``seconds``, while the learner's deliveries are followed closely."""
    readings, end = [], time.monotonic() + seconds
    follower = asyncio.ensure_future(meter.follow_learner())
    try:
        while True:
            readings.append(await meter.read(fleet.pids()))
            if exits := fleet.exited():
                name, code = exits[0]
                raise BenchFailedError(f"{name} exited {code} during a window:\n{fleet.log_tail(name)}")
            if time.monotonic() >= end:
                return readings
            await asyncio.sleep(max(0.0, min(1.0, end - time.monotonic())))
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower


async def ladder(args: argparse.Namespace, shape: Shape, cluster: Cluster, root: Path) -> dict:
    started = time.monotonic()
    fleet = Fleet(root / "roles", cluster.urls, shape, max(args.rollouts))
    meter = Meter(cluster, RUN)
    out: dict = {"levels": [], "stopped": "the last level of --rollouts"}  # why the ladder stopped, in words
    try:
        await meter.connect()
        since = time.time()
        fleet.start_learner()
        await _wait("the learner's topology", meter.topology_ready, 240, fleet)
        await _running(meter, fleet, ["learn-0"], since, 240)
        since = time.time()
        await _running(meter, fleet, fleet.start_verifiers(shape.verifiers), since, 240)
        saturated_in_a_row = 0
        for k in args.rollouts:
            left = args.budget_s - (time.monotonic() - started)
            need_s = args.warmup_s + args.window_s + 60
            if left < need_s:
                out["stopped"] = f"the time budget (--budget-s {args.budget_s:.0f}: {left:.0f} s left before {k} replicas)"
                break
            adding = k - len(fleet.rollouts)
            free = mem_available()
            if free < adding * ROLE_RSS_BYTES + (1 << 30):
                out["stopped"] = f"memory ({free >> 20} MiB available, not enough for {adding} more replicas)"
                break
            since = time.time()
            new = fleet.grow_rollouts(k)
            await _running(meter, fleet, new, since, 240)
            await _window(meter, fleet, args.warmup_s)  # warm-up: readings dropped
            readings = await _window(meter, fleet, args.window_s)
            if dead := readings[-1]["dead_seq"]:
                raise BenchFailedError(f"{dead} dead letters so far: the run is not carrying samples to the learner, "
                                       f"so nothing it measures is R1's step; see {fleet.sk.root}/*.log ('dead_letter')\n"
                                       + fleet.first_dead_letter())
            level = {"rollouts": k, "verifiers": shape.verifiers, **window(readings),
                     "latency": await latencies(meter, readings, LATENCY_READS)}
            level["offered_tokens_s"] = k * shape.tokens_per_s
            level["max_inflight_tasks"] = fleet.max_inflight_tasks
            lat = level["latency"]
            level["samples_s"] = level["streams"]["SCORED"]["msgs_s"] * lat.get("samples_per_msg", 0.0)
            level["tokens_s"] = level["samples_s"] * lat.get("tokens_mean", 0.0)
            level["kept_share"] = level["tokens_s"] / level["offered_tokens_s"] if shape.tokens_per_s else None
            out["levels"].append(level)
            print(report.level_line(level), flush=True)
            if level["kept_share"] is not None and level["kept_share"] < SATURATED:
                saturated_in_a_row += 1
                if saturated_in_a_row == 2:
                    out["stopped"] = f"saturation (under {SATURATED:.0%} of the offered tokens kept at two levels in a row)"
                    break
            else:
                saturated_in_a_row = 0
    finally:
        await meter.close()
        fleet.stop()
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def _git(*argv: str) -> str:
    done = subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def _without_label(argv: list[str]) -> list[str]:
    """The command as run, less ``--label``'s text (the report prints it on its own line)."""
    out, skip = [], False
    for a in argv:
        if skip or a.startswith("--label="):
            skip = False
            continue
        skip = a == "--label"
        if not skip:
            out.append(a)
    return out


def _csv_ints(text: str) -> list[int]:
    items = sorted({int(x) for x in text.split(",") if x})
    if not items or items[0] < 1:
        raise argparse.ArgumentTypeError("a comma list of replica counts >= 1")
    return items


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 short levels and small steps (development, the test)")
    ap.add_argument("--rollouts", type=_csv_ints, help="rollout replicas at each level (default 1,2,4,8,12,16)")
    ap.add_argument("--verifiers", type=int, help="verify replicas (default 2)")
    ap.add_argument("--tokens-per-s", type=float,
                    help="tokens each rollout replica offers per second (default 40000; 0: as fast as it can)")
    ap.add_argument("--warmup-s", type=float, help="seconds at each level before its window (default 15)")
    ap.add_argument("--window-s", type=float, help="seconds of readings per level (default 45)")
    ap.add_argument("--budget-s", type=float, default=840.0, help="stop starting levels past this (default 840)")
    ap.add_argument("--out", type=Path, default=RESULTS / "scale.md", help="the report (scale.json, .png beside it)")
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it (logs, stores)")
    ap.add_argument("--label", default="", help="free text recorded with the results")
    args = ap.parse_args(argv)
    quick = args.quick
    args.rollouts = args.rollouts or ([1, 2] if quick else [1, 2, 4, 8, 12, 16])
    args.warmup_s = args.warmup_s if args.warmup_s is not None else (5.0 if quick else 15.0)
    args.window_s = args.window_s if args.window_s is not None else (10.0 if quick else 45.0)
    args.shape = Shape(
        tokens_per_s=args.tokens_per_s if args.tokens_per_s is not None else (20_000.0 if quick else Shape().tokens_per_s),
        verifiers=args.verifiers or (1 if quick else Shape().verifiers),
        groups_per_step=8 if quick else Shape().groups_per_step,
        scored_max_mb=256 if quick else Shape().scored_max_mb,
    )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    shape: Shape = args.shape
    meta = {"commit": _git("rev-parse", "--short", "HEAD"),
            "dirty": [line[3:] for line in _git("status", "--porcelain").splitlines()],
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(),
            "loadavg_before": [round(x, 2) for x in os.getloadavg()], "label": args.label, "quick": args.quick,
            "command": "python -m bench.scale " + " ".join(_without_label(sys.argv[1:] if argv is None else argv)),
            "shape": {f: getattr(shape, f) for f in shape.__struct_fields__}}
    keep = args.keep
    workdir = contextlib.nullcontext(str(keep)) if keep else tempfile.TemporaryDirectory(prefix="rlvr-scale-")
    with workdir as tmp:
        root = Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        # Room for SCORED (its max_bytes is reserved), DEAD's, the work queues and the buckets.
        cluster = Cluster(root / "nats", shape.scored_max_mb + 1024)
        try:
            cluster.start()
            result = asyncio.run(ladder(args, shape, cluster, root))
        except BenchFailedError as e:
            print(f"bench.scale: {e}", file=sys.stderr)
            return 1
        finally:
            cluster.stop()
    meta["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    result = {**meta, **result}
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    report.write(result, out)
    print(f"wrote {out}, {out.with_suffix('.json').name} and {out.with_suffix('.png').name}")
    return 0
