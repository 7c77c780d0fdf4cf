"""The chaos runner: plans of seeded faults, the loop that injects each one and
checks the invariants after it, and the JSON report.

    python -m bench.chaos --quick            # >= 25 faults, one of each surface, CI (tests/test_chaos.py)
    python -m bench.chaos --lanes 3          # the full run: >= 300 faults of >= 40 kinds, 3 scenarios at a time
    python -m bench.chaos --seed 7 --report bench/results/chaos_full.json
    python -m bench.chaos --soak --minutes 60   # the built-in example, light faults, a leak check (soak.py)
    python -m bench.chaos --quick --scenarios agents   # agent episodes under faults alone (agent_scenario.py)

After every fault: the committed ledger floor must pass where it was before
the fault (``progress_s``; the longest is the report's ``longest_stall``),
every role must be running and heartbeating (a role that exited on its own is
a finding, restarted), and custody must hold so far (no sample settled twice,
none lost below the floor). At the end of each scenario, ``Scenario.finish``
drains every hop and the final checks require every published sample trained
or dropped exactly once, every consumer drained and DEAD holding only the
injected poison. Needs root for the tmpfs (checkpoint disk full) and the
network namespaces (cluster); without them those faults are skipped and the
report says so.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

from bench.chaos import faults as F
from bench.chaos import poison as P
from bench.chaos.scenario import Scenario
from bench.chaos.skeleton import Server

STALL_LIMIT_S = 150.0
SCENARIOS = ("main", "main2", "main3", "cluster", "engine", "agents", "autoscale", "envs", "stages")


def _server_conf(path: Path, max_file_store_mib: int) -> Path:
    path.write_text(f"jetstream {{\n  max_file_store: {max_file_store_mib}MB\n}}\n")
    return path


def scenario_server(root: Path, run: str) -> Server:
    """A scenario's own nats-server (48 MiB of JetStream file store), started: what every scenario but the cluster uses."""
    root.mkdir(parents=True, exist_ok=True)
    return Server(root / "nats-store", conf=_server_conf(root / "nats.conf", 48), name=f"{run}-n1").start()


def _mount_tmpfs(path: Path, mib: int) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(path)]).returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def main_plan(rng: random.Random, quick: bool, catalogue: dict, disk_full: bool) -> list[tuple[str, object]]:
    """(label, fn(sc, rng)) after the start-up kill; the retention gap goes last (it changes the learner's config)."""
    def pick(subject: str, n: int | None):
        cases = catalogue[subject]
        return cases if n is None else rng.sample(cases, min(n, len(cases)))

    plan: list[tuple[str, object]] = []
    poison_n = 6 if quick else None
    for subject in ("tasks", "rollouts", "scored", "weights"):
        cases = pick(subject, 4 if quick and subject == "weights" else poison_n)
        plan.append((f"poison:{subject}", lambda sc, r, s=subject, c=cases: P.inject(sc, r, s, c)))
    reps = 1 if quick else 2
    stops = [("learn-0", f) for f in (0.5, 2)] + [("rollout-0", f) for f in (0.5, 2)] + \
            [("verify-0", f) for f in (0.5, 2, 25)]
    if not quick:
        stops += [("learn-0", 25), ("rollout-0", 25), ("verify-1", 0.5), ("verify-1", 2), ("verify-1", 25)]
    for rep in range(reps):
        plan += [(f"sigstop:{r}:{f}x", lambda sc, g, r=r, f=f: F.stop_role(sc, g, r, f)) for r, f in stops]
    kills = 2 if quick else 14
    plan += [("sigkill:learn", F.kill_learner_seeded)] * kills
    plan += [("sigkill:learn:commit_window", F.kill_learner_in_commit_window)] * (1 if quick else 6)
    for replica, n in (("rollout-0", 1 if quick else 8), ("verify-0", 1 if quick else 6), ("verify-1", 2 if quick else 6)):
        plan += [(f"sigkill:{replica}", lambda sc, g, r=replica: F.kill_role(sc, g, r))] * n
    plan += [("sigkill:nats-server", F.kill_server)] * (1 if quick else 5)
    plan += [("second_learner", F.second_learner)] * (1 if quick else 2)
    deletes = [("ROLLOUTS", "verify"), ("TASKS", "rollout")] + ([] if quick else [("SCORED", "learn")])
    plan += [(f"consumer_deleted:{d}", lambda sc, g, k=k, d=d: F.delete_consumer(sc, g, k, d)) for k, d in deletes]
    streams = [] if quick else ["ROLLOUTS", "TASKS"]
    plan += [(f"stream_deleted:{k}", lambda sc, g, k=k: F.delete_stream(sc, g, k)) for k in streams]
    plan += [] if quick else [("kv_deleted", F.delete_kv_bucket)]
    envs = [] if quick else ["raise", "hang"]
    plan += [(f"environment:{m}", lambda sc, g, m=m: F.environment_fault(sc, g, m)) for m in envs]
    plan += [("jetstream:store_full", F.store_full)] * (1 if quick else 2)
    if disk_full:
        plan += [("checkpoint_disk_full", F.checkpoint_disk_full)] * (1 if quick else 3)
        plan += [("nats_store_disk_full", F.nats_store_disk_full)] * (1 if quick else 3)
    rng.shuffle(plan)
    plan.append(("retention_gap", F.retention_gap))
    return plan


def run_fault(sc: Scenario, label: str, fn, rng: random.Random) -> dict:
    before = len(sc.violations)
    floor0 = sc.committed_floor()
    t0 = time.monotonic()
    try:
        rec = fn(sc, rng)
    except Exception as e:  # the runner's own failure: reported as a finding, the suite goes on
        rec = {"kind": label, "runner_error": f"{type(e).__name__}: {e}"}
        sc.violations.append(f"{label}: the runner failed to inject it: {type(e).__name__}: {e}")
    rec["label"] = label
    rec["started_at"] = round(time.time() - (time.monotonic() - t0), 3)  # unix time, to match the role logs
    sc.violations += sc.revive()
    progress = sc.wait_progress(floor0, STALL_LIMIT_S)
    rec["progress_s"] = None if progress is None else round(time.monotonic() - t0, 2)
    rec["stall_s"] = sc.longest_stall(since=t0)
    if progress is None:
        sc.violations.append(f"{label}: the ledger floor did not advance within {STALL_LIMIT_S}s "
                             f"(floor {floor0}; learner log tail: {sc.sk.log_text('learn-0')[-400:]})")
    sc.violations += sc.all_alive(since=time.monotonic(), timeout_s=20)
    chk = sc.custody(final=False)
    rec["check"] = {"floor": chk.floor, "step": chk.step, "published": chk.published, "trained": chk.trained,
                    "in_flight": chk.in_flight, "lost": len(chk.lost), "twice": len(chk.twice)}
    for v in chk.violations:
        if v not in sc.violations:
            sc.violations.append(f"after {label}: {v}")
    rec["violations"] = sc.violations[before:]
    print(f"[chaos] {sc.run} {label}: stall {rec['stall_s']}s floor {chk.floor} "
          f"trained {chk.trained} lost {len(chk.lost)} twice {len(chk.twice)} "
          f"{'OK' if not rec['violations'] else 'VIOLATIONS ' + str(rec['violations'])[:400]}", flush=True)
    return rec


def play(sc: Scenario, plan: list[tuple[str, object]], rng: random.Random, only: list[str] = ()) -> list[dict]:
    """Each fault of ``plan`` in turn (those whose label starts with one of ``only``, if given), checked after it."""
    return [run_fault(sc, label, fn, rng) for label, fn in plan
            if not only or any(label.startswith(o) for o in only)]


def run_main_scenario(root: Path, run: str, seed: int, quick: bool, only: list[str] = ()) -> dict:
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    conf = _server_conf(root / "nats.conf", 48)
    # Both the server's store and the learner's out_dir on a small tmpfs each, to fill them (root only).
    store_disk = _mount_tmpfs(root / "nats-store", 192)
    server = Server(root / "nats-store", conf=conf, name=f"{run}-n1", monitor=True).start()
    out = root / "learner-out"
    out_disk = _mount_tmpfs(out, 512)
    disk = out_disk and store_disk
    sc = Scenario(root, run, seed=seed, servers=[server], out_dir=out)
    records: list[dict] = []
    result: dict = {"scenario": "main", "run": run, "seed": seed, "checkpoint_tmpfs": disk}
    try:
        # A first learner that will not reach its first checkpoint, killed after a seeded step.
        sc.start(learner_config=sc.config("learn-first", learn={"checkpoint_every": 1000}))
        sc.start_sampling()
        records.append(run_fault(sc, "sigkill:learn:before_first_checkpoint", F.kill_learner_before_first_checkpoint,
                                 rng))
        catalogue = P.catalogue(run, sc.obs.max_payload())
        records += play(sc, main_plan(rng, quick, catalogue, disk), rng, only)
        time.sleep(20)  # partial groups (poison first copies, retention) expire and reach a checkpoint
        result["finish"] = sc.finish()
    except Exception as e:  # the runner's own failure: kept with the faults done so far
        traceback.print_exc()
        sc.violations.append(f"the runner failed: {type(e).__name__}: {e}")
    finally:
        result["faults"] = records
        result["violations"] = sc.violations
        sc.close()
        server.kill()
        for mounted, path in ((out_disk, out), (store_disk, root / "nats-store")):
            if mounted:
                _umount(path)
    return result


def _cluster(*a):
    from bench.chaos.cluster import run_cluster_scenario

    return run_cluster_scenario(*a)


def _agents(*a):
    from bench.chaos.agent_scenario import run_agent_scenario

    return run_agent_scenario(*a)


def _engine(*a):
    from bench.chaos.engine import run_engine_scenario

    return run_engine_scenario(*a)


def _autoscale(*a):
    from bench.chaos.autoscale_scenario import run_autoscale_scenario

    return run_autoscale_scenario(*a)


def _envs(*a):
    from bench.chaos.env_scenario import run_env_scenario

    return run_env_scenario(*a)


def _stages(*a):
    from bench.chaos.stages_scenario import run_stages_scenario

    return run_stages_scenario(*a)


def summarize(scenarios: list[dict], args, wall_s: float) -> dict:
    faults = [f for s in scenarios for f in s.get("faults", [])]
    kinds = Counter(f.get("kind", f["label"]).split(":x")[0] for f in faults)
    poison = [f for f in faults if f.get("kind", "").startswith("poison:")]
    published = trained = lost = twice = in_flight = 0
    dropped: Counter[str] = Counter()
    for s in scenarios:
        c = s.get("finish", {}).get("custody")
        if c is None:
            continue
        c = c if isinstance(c, dict) else _jsonable(c)  # the cluster's comes back as JSON
        published += c["published"]
        trained += c["trained"]
        lost += len(c["lost"])
        twice += len(c["twice"])
        in_flight += c["in_flight"]
        dropped.update(c["dropped_listed"])
        dropped.update(c["dropped_unlisted"])
    stalls = [(f["stall_s"], f["label"]) for f in faults if f.get("stall_s") is not None]
    longest = max(stalls, default=(None, None))
    violations = [v for s in scenarios for v in s.get("violations", [])]
    return {
        "command": " ".join(["python -m bench.chaos", *sys.argv[1:]]),
        "seed": args.seed, "quick": args.quick, "wall_s": round(wall_s, 1),
        "faults_injected": len(faults), "faults_by_kind": dict(sorted(kinds.items())),
        "poison_messages": sum(f.get("poison_messages", 0) for f in poison),
        "poison_dead_lettered": sum(f.get("dead_lettered", 0) for f in poison),
        "samples_published": published, "samples_trained": trained, "samples_dropped_by_reason": dict(dropped),
        "samples_lost": lost, "samples_trained_twice": twice, "samples_in_flight_at_end": in_flight,
        "longest_stall_s": longest[0], "longest_stall_fault": longest[1],
        "violations": violations, "ok": not violations and lost == 0 and twice == 0,
        "scenarios": scenarios,
    }


class _Saved(list):
    """The scenario results, each also written to the work directory as it completes."""

    def __init__(self, work: Path) -> None:
        super().__init__()
        self.work = work

    def append(self, result: dict) -> None:
        super().append(result)
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / f"scenario-{len(self)}-{result.get('scenario')}.json").write_text(json.dumps(_jsonable(result)))


def _jsonable(obj):
    import msgspec

    return json.loads(msgspec.json.encode(obj, enc_hook=lambda o: getattr(o, "__dict__", str(o))))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the CI subset (>= 25 faults, < 10 minutes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report", help="write the JSON report here")
    p.add_argument("--work-dir", help="keep run directories and logs here (default: a temporary directory)")
    p.add_argument("--scenarios", default="", help="comma-separated subset of " + ",".join(SCENARIOS))
    p.add_argument("--only", default="", help="comma-separated fault label prefixes (debugging a fault)")
    p.add_argument("--soak", action="store_true",
                   help="the soak (bench/chaos/soak.py): the built-in example under `up` with light faults, every "
                        "role's RSS, fds, threads and the store sampled each minute; writes bench/results/soak.*")
    p.add_argument("--minutes", type=float, default=60.0, help="the soak's length (default 60)")
    p.add_argument("--fault-every", type=float, default=3.0, help="minutes between the soak's light faults")
    p.add_argument("--lanes", type=int, default=2,
                   help="scenarios run side by side in this many processes (bench/chaos/lanes.py; 1: one after another)")
    p.add_argument("--summarize", action="store_true",
                   help="only rebuild the report from the scenario-*.json files a run left in --work-dir")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="rlvr-chaos-"))
    if args.soak:
        from bench.chaos.soak import main as soak

        signal.signal(signal.SIGTERM, signal.default_int_handler)  # unwind: `up` and its roles are stopped
        return soak(args.minutes, args.seed, work, fault_every_min=args.fault_every)
    if args.summarize:
        saved = [json.loads(f.read_text()) for f in sorted(work.rglob("scenario-*.json"))]
        report = _jsonable(summarize(saved, args, 0.0))
        report["work_dir"] = str(work)
        if args.report:
            Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps({k: v for k, v in report.items() if k != "scenarios"}, indent=2))
        return 0 if report["ok"] else 1
    if work.exists() and any(work.iterdir()):
        # A server store or checkpoint left by another run would be read as this run's.
        p.error(f"--work-dir {work} is not empty")
    wanted = set(filter(None, args.scenarios.split(","))) or (
        {"main", "agents", "autoscale", "envs", "stages"} if args.quick else set(SCENARIOS))
    # SIGTERM (a CI timeout, kill): unwind, so every process, mount and namespace is cleaned up.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    only = [o for o in args.only.split(",") if o]
    t0 = time.monotonic()
    if args.lanes > 1 and len(wanted) > 1:
        from bench.chaos.lanes import plan_lanes, run_lanes

        rest = ["--seed", str(args.seed)] + (["--quick"] if args.quick else []) + (["--only", args.only] if only else [])
        lanes = plan_lanes([n for n in SCENARIOS if n in wanted], args.lanes, args.quick)
        return _report(run_lanes(lanes, rest, work), args, work, t0)
    scenarios = _Saved(work)
    runners = {
        "main": lambda: run_main_scenario(work / "main", "chaos", args.seed, args.quick, only),
        "main2": lambda: run_main_scenario(work / "main2", "chaos2", args.seed + 1, args.quick, only),
        "main3": lambda: run_main_scenario(work / "main3", "chaos9", args.seed + 8, args.quick, only),
        "cluster": lambda: _cluster(work / "cluster", "chaos3", args.seed + 2, args.quick),
        "engine": lambda: _engine(work / "engine", "chaos4", args.seed + 3, args.quick),
        "agents": lambda: _agents(work / "agents", "chaos5", args.seed + 4, args.quick, only),
        "autoscale": lambda: _autoscale(work / "autoscale", "chaos6", args.seed + 5, args.quick, only),
        "envs": lambda: _envs(work / "envs", "chaos7", args.seed + 6, args.quick, only),
        "stages": lambda: _stages(work / "stages", "chaos8", args.seed + 7, args.quick, only),
    }
    for name in SCENARIOS:
        if name not in wanted:
            continue
        try:
            result = runners[name]()
        except Exception as e:  # the runner's own failure: reported, the other scenarios still run
            result = {"scenario": name, "faults": [],
                      "violations": [f"scenario {name} crashed in the runner: {type(e).__name__}: {e}"]}
        result["name"] = name  # main and main2 are both scenario "main"
        scenarios.append(result)
    return _report(scenarios, args, work, t0)


def _report(scenarios: list[dict], args, work: Path, t0: float) -> int:
    report = _jsonable(summarize(scenarios, args, time.monotonic() - t0))
    report["work_dir"] = str(work)
    text = json.dumps(report, indent=2)
    if args.report:
        Path(args.report).write_text(text + "\n")
    brief = {k: v for k, v in report.items() if k != "scenarios"}
    print(json.dumps(brief, indent=2))
    return 0 if report["ok"] else 1
