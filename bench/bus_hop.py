"""The verify hop against a raw nats-py relay: samples/s and CPU per sample, side by side (issue 14).

    python bench/bus_hop.py                                # both sizes, 1 worker, tracing as `up`: 3000 samples x 3
    python bench/bus_hop.py --samples 500 --repeats 1      # quick: about a minute
    python bench/bus_hop.py --tracing off,full --workers 1,2
    python bench/bus_hop.py --tracing sampled              # needs observability.trace_sample_ratio

It starts a real nats-server (temp store, free port) and creates each run's
topology with the project's own code (``Bus.ensure_topology``, as the learner
and ``rlvr-actor init`` do): run ``hopB`` for the relay and one run
``hopA-w<workers>-<tracing>`` per project configuration, identical. Each run
has its own process, all started and warm before any timing:

- **project**: one ``rlvr-actor --role verify`` process with the built-in
  example's verify settings (``exact`` verifier, ``pool_size`` = ``--workers``,
  ``concurrency`` 64, no warm verifiers, default bus and log settings), waited
  for until its heartbeat says ``running`` with every pool worker alive;
- **relay**: ``python bench/bus_hop.py --relay URL hopB`` (bus_common.relay):
  the same hop in plain nats-py with the same guarantees and a window of 64.

For each size (small ~270 B, realistic ~9.5 KB: 512 token ids + 512
log-probs) every path gets a warm-up batch, then ``--repeats`` rounds; each
round visits every path (the relay and each ``--workers`` x ``--tracing``
configuration) one after the other, starting with the next one each round and
going backwards every other round, so that load from elsewhere on the machine
hits all alike. A visit publishes ``--samples`` Samples in group messages of
``bus_common.GROUP`` (``SampleGroup``, as a rollout publishes a task's group:
protocol/groups.py; pre-encoded, unique ids, core publishes to the rollouts
subject, which the ROLLOUTS stream stores) and times from the first publish
until SCORED holds every group's ``ScoredGroup`` (polling its stream info); CPU
is read from /proc for the path's process tree (role + pool workers, or the
relay) and for nats-server, from before the first publish until every input
is acked. This process (the publisher) is reported apart.

``--tracing``: ``off`` = trace_exporter "none"; ``default`` (the default) = what
``rlvr-actor up`` runs: "file" at the config's default ``trace_sample_ratio``
(2%), that share of the inputs' traceparents flagged sampled (the feeder's head
decision, forwarded); ``full`` = "file" with every input sampled; ``sampled`` =
"file" with ``observability.trace_sample_ratio = 0.1``, and 10% of the inputs'
traceparents flagged sampled;
``noop`` = "none" with ``OTEL_SDK_DISABLED=true`` in the role's environment, so
the OpenTelemetry API hands out its no-op tracer: no span is even created
(what an unsampled message could cost at best). The relay never traces.
``--profile DIR`` runs each role and the relay under cProfile (main thread only).

Rates and CPU are per sample (a message carries ``GROUP`` of them). Prints a
Markdown table (medians over repeats) and appends one JSON line per
configuration and size to ``bench/results/bus_hop.jsonl`` (lines before the
group messages have per-message keys, ``msg_s`` and ``*_per_msg``, each message
one sample). Linux only (/proc).
Not here: the learner or rollout consume paths.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import anyio

from bus_common import GROUP, SIZES, groups, relay, tree_cpu_s  # bench/ is sys.path[0]
from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, ConfigError, NatsConfig, ObservabilityConfig
from rlvr.cli.natsserver import NatsServer
from rlvr.protocol import Heartbeat, RunNames, ScoredGroup, decode

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "bus_hop.jsonl"
RUN_A, RUN_B = "hopA", "hopB"
WINDOW = 64
# mode: (trace_exporter, trace_sample_ratio or None to leave it unset, share of inputs flagged sampled, role env)
TRACING = {
    "noop": ("none", None, 1.0, {"OTEL_SDK_DISABLED": "true"}),  # the SDK's no-op tracer: the floor
    "off": ("none", None, 1.0, {}),
    "sampled": ("file", 0.1, 0.1, {}),
    # What `rlvr-actor up` runs: file traces at the config's default ratio (2%), and that
    # share of the inputs flagged sampled by their root (the feeder).
    "default": ("file", None, ObservabilityConfig().trace_sample_ratio, {}),
    "full": ("file", 1.0, 1.0, {}),
}


class SampledTracingUnsupportedError(RuntimeError):
    """The project's config refuses ``observability.trace_sample_ratio`` (not added yet)."""


def role_config(path: Path, run: str, url: str, workers: int, tracing: str) -> None:
    exporter, ratio, _, _ = TRACING[tracing]
    obs = f'trace_exporter = "{exporter}"\n' + (f"trace_sample_ratio = {ratio}\n" if ratio is not None else "")
    path.write_text(
        f'run = "{run}"\n[nats]\nurl = "{url}"\n'
        f"[verify]\npool_size = {workers}\nconcurrency = {WINDOW}\nwarm_verifiers = []\n"
        f"[observability]\n{obs}"
    )
    from rlvr.cli.roles import load_role_config

    try:
        load_role_config("verify", path)
    except ConfigError as e:
        if tracing == "sampled":
            raise SampledTracingUnsupportedError(
                "--tracing sampled needs observability.trace_sample_ratio (issue 14), which this "
                f"checkout's config refuses: {e}"
            ) from None
        raise


def start(argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop(proc: subprocess.Popen | None) -> None:
    """SIGTERM (the role drains), then SIGKILL; by PID only."""
    if proc is None or proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


async def wait_for(pred, what: str, timeout_s: float, every_s: float = 0.01) -> None:
    deadline = time.monotonic() + timeout_s
    while not await pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout_s:.0f}s")
        await asyncio.sleep(every_s)


async def wait_warm(bus: Bus, workers: int, proc: subprocess.Popen, log: Path) -> None:
    """Until the role's heartbeat says running with every pool worker alive."""
    sub = await bus.nc.subscribe(bus.names.status("verify"))
    try:
        with anyio.fail_after(180):
            async for msg in sub.messages:
                hb = decode(msg.data, Heartbeat)
                if hb.state == "running" and hb.gauges.get("workers_alive", 0) >= workers:
                    return
    except TimeoutError:
        raise TimeoutError(f"the verify role never reported a warm pool; see {log}") from None
    finally:
        await sub.unsubscribe()
        if proc.poll() is not None:
            raise RuntimeError(f"the verify role exited with {proc.returncode}; see {log}")


async def one_round(bus: Bus, tag: str, n: int, size: str, ratio: float, pids: list[int], server_pid: int) -> dict:
    """Publish ``n`` samples (in group messages) to ``bus``'s run and time them into SCORED; CPU by process group."""
    names = bus.names
    run = names.run
    payloads = groups(run, tag, n, size, ratio, seed=zlib.crc32(tag.encode()))
    messages = len(payloads)
    scored_stream = names.stream("SCORED")

    async def stored() -> int:
        return (await bus.js.stream_info(scored_stream)).state.messages

    base = await stored()
    cpu0, srv0, me0 = tree_cpu_s(pids), tree_cpu_s([server_pid]), time.process_time()
    started = time.perf_counter()
    for data, headers in payloads:
        await bus.nc.publish(names.rollouts, data, headers=headers)
    await bus.nc.flush()
    published = time.perf_counter() - started
    await wait_for(lambda: _ge(stored(), base + messages), f"{run}: {messages} ScoredGroups stored", 600)
    seconds = time.perf_counter() - started

    async def settled() -> bool:
        info = await bus.js.consumer_info(names.stream("ROLLOUTS"), "verify")
        return info.num_ack_pending == 0 and info.num_pending == 0

    await wait_for(settled, f"{run}: inputs acked", 60, every_s=0.05)
    cpu, srv, me = tree_cpu_s(pids) - cpu0, tree_cpu_s([server_pid]) - srv0, time.process_time() - me0
    last = decode((await bus.js.get_last_msg(scored_stream, names.scored)).data, ScoredGroup)
    outcomes = {v.outcome for v in last.verdicts}
    if not last.task_id.startswith(tag) or outcomes != {"ok"}:
        raise RuntimeError(f"{run}: the last ScoredGroup is {last.task_id} with outcomes {sorted(outcomes)}")
    return {"samples_s": n / seconds, "messages": messages, "seconds": round(seconds, 3),
            "publish_s": round(published, 3), "cpu_ms_per_sample": 1e3 * (cpu + srv) / n,
            "path_cpu_ms_per_sample": 1e3 * cpu / n, "server_cpu_ms_per_sample": 1e3 * srv / n,
            "publisher_cpu_ms_per_sample": 1e3 * me / n}


async def _ge(value, target: int) -> bool:
    return await value >= target


async def bench(args: argparse.Namespace, srv: NatsServer, tmp: Path) -> list[dict]:
    """Every configuration's role and the relay stay up, each on its own run, so
    that every round visits all of them in turn (load drift hits all alike)."""
    confs = [(w, t) for w in args.workers for t in args.tracing]
    runs = [RUN_B] + [f"{RUN_A}-w{w}-{t}" for w, t in confs]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    buses: dict[str, Bus] = {}
    procs: dict[str, subprocess.Popen] = {}
    out = []
    try:
        for run in runs:
            buses[run] = await Bus.connect(NatsConfig(url=srv.url), BusConfig(), RunNames(run), "bench")
            await buses[run].ensure_topology()
        relay_log = tmp / "relay.log"
        relay_prof = ["-m", "cProfile", "-o", str(Path(args.profile).resolve() / "relay.prof")] if args.profile else []
        procs[RUN_B] = start([sys.executable, *relay_prof, str(Path(__file__).resolve()), "--relay", srv.url, RUN_B],
                             relay_log, env)
        for run, (workers, tracing) in zip(runs[1:], confs, strict=True):
            conf = run.removeprefix(f"{RUN_A}-")
            cfg, log = tmp / f"{conf}.toml", tmp / f"{conf}.log"
            role_config(cfg, run, srv.url, workers, tracing)
            prefix = ["-m", "cProfile", "-o", str(Path(args.profile).resolve() / f"verify-{conf}.prof")] \
                if args.profile else []
            argv = [sys.executable, *prefix, "-m", "rlvr.cli", "--role", "verify", "--config", str(cfg),
                    "--replica", f"bench-{conf}"]
            procs[run] = start(argv, log, {**env, **TRACING[tracing][3], "RLVR_RUN_DIR": str(tmp / conf)})
        await wait_for(lambda: _has(relay_log, "ready"), "the raw relay binding its consumer", 60, every_s=0.05)
        for run, (workers, _) in zip(runs[1:], confs, strict=True):
            await wait_warm(buses[run], workers, procs[run], tmp / f"{run.removeprefix(RUN_A + '-')}.log")
        share = {RUN_B: 1.0, **{run: TRACING[t][2] for run, (_, t) in zip(runs[1:], confs, strict=True)}}
        for size in args.sizes:
            rounds: dict[str, list[dict]] = {run: [] for run in runs}
            for run in runs:  # warm-up, not counted
                await one_round(buses[run], f"{size}-warm", args.warmup, size, share[run], [procs[run].pid],
                                srv.proc.pid)
            for r in range(args.repeats):
                # Each round starts with the next path, and every other round goes backwards.
                order = runs[r % len(runs):] + runs[: r % len(runs)]
                for run in order if r % 2 == 0 else order[::-1]:
                    res = await one_round(buses[run], f"{size}-r{r}", args.samples, size, share[run],
                                          [procs[run].pid], srv.proc.pid)
                    rounds[run].append(res)
                    print(f"  {size:9} round {r} {run:16}: {res['samples_s']:7.0f} samples/s, "
                          f"{res['cpu_ms_per_sample']:.3f} CPU ms/sample", flush=True)
            for run, (workers, tracing) in zip(runs[1:], confs, strict=True):
                out.append(summary(workers, tracing, size, rounds[run], rounds[RUN_B]))
        for run in runs[1:]:
            stop(procs.pop(run))  # traces are flushed on a clean stop
        handled = (args.warmup + args.samples * args.repeats) * len(args.sizes)
        for row in out:
            traces = sum(f.stat().st_size for f in (tmp / f"w{row['workers']}-{row['tracing']}").rglob("*.jsonl"))
            row["trace_bytes_per_sample"] = round(traces / handled, 1)
    finally:
        for proc in procs.values():
            stop(proc)
        for bus in buses.values():
            await bus.close()
    return out


async def _has(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text(errors="replace")


def summary(workers: int, tracing: str, size: str, project: list[dict], relayed: list[dict]) -> dict:
    rounds = {RUN_A: project, RUN_B: relayed}

    def med(run: str, key: str) -> float:
        return statistics.median(r[key] for r in rounds[run])

    a, b = med(RUN_A, "samples_s"), med(RUN_B, "samples_s")
    return {
        "size": size, "workers": workers, "tracing": tracing,
        "project_samples_s": round(a, 1), "relay_samples_s": round(b, 1), "ratio": round(a / b, 3),
        "ratio_paired_median": round(statistics.median(
            x["samples_s"] / y["samples_s"] for x, y in zip(rounds[RUN_A], rounds[RUN_B], strict=True)), 3),
        **{f"{who}_{key}": round(med(run, key), 3) for who, run in (("project", RUN_A), ("relay", RUN_B))
           for key in ("cpu_ms_per_sample", "path_cpu_ms_per_sample", "server_cpu_ms_per_sample",
                       "publisher_cpu_ms_per_sample")},
        "rounds": {"project": rounds[RUN_A], "relay": rounds[RUN_B]},
    }


def table(rows: list[dict]) -> str:
    lines = ["| size | workers | tracing | relay samples/s | project samples/s | ratio | relay CPU ms/sample | "
             "project CPU ms/sample (role+pool / nats-server) | trace B/sample |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(
            f"| {r['size']} | {r['workers']} | {r['tracing']} | {r['relay_samples_s']:,.0f} | "
            f"{r['project_samples_s']:,.0f} | **{r['ratio']:.2f}x** | {r['relay_cpu_ms_per_sample']:.2f} | "
            f"{r['project_cpu_ms_per_sample']:.2f} ({r['project_path_cpu_ms_per_sample']:.2f} / "
            f"{r['project_server_cpu_ms_per_sample']:.2f}) | {r.get('trace_bytes_per_sample', 0):,.0f} |")
    return "\n".join(lines)


def _csv(kind, choices=None):
    def parse(text: str):
        items = [kind(x) for x in text.split(",") if x]
        if choices is not None and (bad := [x for x in items if x not in choices]):
            raise argparse.ArgumentTypeError(f"{bad} not in {list(choices)}")
        return items
    return parse


def _git(*argv: str) -> str:
    """git's output in the repository holding this file; "" outside one (an exported tree)."""
    done = subprocess.run(["git", *argv], cwd=HERE.parent, capture_output=True, text=True)
    return done.stdout.rstrip() if done.returncode == 0 else ""


def _workdir(keep: str | None):
    if keep is None:
        return tempfile.TemporaryDirectory(prefix="rlvr-bus-hop-")
    Path(keep).mkdir(parents=True, exist_ok=True)
    return contextlib.nullcontext(str(Path(keep).resolve()))


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--relay":
        asyncio.run(relay(sys.argv[2], sys.argv[3], WINDOW))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=3000, help=f"samples per round, in groups of {GROUP}")
    ap.add_argument("--repeats", type=int, default=3, help="rounds per path, alternating which goes first")
    ap.add_argument("--warmup", type=int, default=200, help="samples per path before the rounds")
    ap.add_argument("--sizes", type=_csv(str, SIZES), default=list(SIZES))
    ap.add_argument("--workers", type=_csv(int), default=[1], help="pool sizes, e.g. 1,2")
    ap.add_argument("--tracing", type=_csv(str, TRACING), default=["default"],
                    help="noop, off, sampled, default, full (comma list; default: as `up` traces)")
    ap.add_argument("--profile", help="run each role and the relay under cProfile: DIR/verify-<config>.prof, DIR/relay.prof")
    ap.add_argument("--keep", help="work in DIR and keep it (role logs, traces, nats store) instead of a temp dir")
    ap.add_argument("--label", default="", help="free text recorded with the results (e.g. baseline)")
    ap.add_argument("--results", type=Path, default=RESULTS, help="the JSON-lines file appended to")
    ap.add_argument("--no-record", action="store_true", help="append nothing")
    args = ap.parse_args()
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    commit = _git("rev-parse", "--short", "HEAD")
    # The code measured is the working tree: say which of its files differ from the commit.
    dirty = _git("status", "--porcelain", "--", "actors", "verify", "protocol").splitlines()
    load_before = os.getloadavg()
    try:
        with tempfile.TemporaryDirectory() as tmp:  # a refused config fails before anything starts
            for tracing in args.tracing:
                role_config(Path(tmp) / "check.toml", RUN_A, "nats://127.0.0.1:4222", 1, tracing)
        with _workdir(args.keep) as tmp, NatsServer(Path(tmp) / "nats") as srv:
            try:
                rows = anyio.run(bench, args, srv, Path(tmp))
            except Exception:
                for log in sorted(Path(tmp).glob("*.log")):  # the temp dir goes: show why first
                    print(f"--- {log.name} (tail)\n{log.read_text(errors='replace')[-3000:]}", file=sys.stderr)
                raise
    except SampledTracingUnsupportedError as e:
        print(f"bus_hop: {e}", file=sys.stderr)
        return 2
    print(table(rows))
    meta = {"commit": commit, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(),
            "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "dirty": [line[3:] for line in dirty], "label": args.label,
            "command": "python bench/bus_hop.py " + shlex.join(sys.argv[1:]), "samples": args.samples,
            "repeats": args.repeats, "window": WINDOW, "group_size": GROUP}
    if not args.no_record:
        with open(args.results, "a") as f:
            for row in rows:
                f.write(json.dumps({**meta, **row}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
