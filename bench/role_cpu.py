"""CPU seconds per 1,000 samples for each role of an `rlvr-actor up` run, and the step times.

Runs the built-in example (or ``--config``) for ``--steps`` optimizer steps with held-out rounds off,
samples every process of the run with ``bench/vs_trl/watch.py`` (the last reading of each pid, so a
process that ended still counts), and divides each role's CPU seconds by the samples the verifiers
scored (the learner's ``samples.scored``). The preparation step (cold-start SFT) is reported apart
and left out of the per-sample figures. ``--source DIR`` runs another checkout of the project (a
``git worktree`` of an older commit): ``rlvr`` is imported from there through ``PYTHONPATH``
(verifier pool workers, which start with a scrubbed environment, still load this checkout's
``rlvr``; their protocol must be the same).

    OMP_NUM_THREADS=1 .venv/bin/python bench/role_cpu.py --steps 150 --label after --out bench/results/role_cpu.jsonl
    git worktree add /tmp/before 553ab6d
    OMP_NUM_THREADS=1 .venv/bin/python bench/role_cpu.py --steps 150 --source /tmp/before --label before ...

Not covered: wall-clock time to a pass@1 gain (bench/vs_trl.py and ``up``'s own summary measure that).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROLES = ("learn", "rollout", "verify", "verify pool worker", "nats-server", "up (launcher)")


def run_once(args: argparse.Namespace, work: Path) -> dict:
    from vs_trl.watch import Watch

    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    if args.source:
        shim = work / "src"
        shim.mkdir(parents=True, exist_ok=True)
        link = shim / "rlvr"
        if not link.exists():
            link.symlink_to(Path(args.source).resolve())
        env["PYTHONPATH"] = str(shim)
    run_dir = work / "run"
    cmd = [sys.executable, "-m", "rlvr.cli", "up", "--display", "plain", "--run-dir", str(run_dir),
           "--set", f"learn.steps={args.steps}", "--set", "learn.eval.every_steps=0", "--set", "learn.eval.prompts=0"]
    if args.config:
        cmd += ["--config", args.config]
    for kv in args.set:
        cmd += ["--set", kv]
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    with open(work / "up.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work)
        with Watch(proc.pid, every_s=0.5) as watch:
            rc = proc.wait()
    wall = time.monotonic() - t0
    summary = json.loads((run_dir / "learner_summary.json").read_text())
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
               if line.startswith("{") and '"step"' in line]
    steps = [r for r in records if "train_s" in r]
    scored = summary["samples"]["scored"]
    cpu = watch.cpu_by_label()
    per_k = {role: round(1000 * cpu.get(role, 0.0) / max(scored, 1), 3) for role in ROLES}
    total = sum(v for k, v in cpu.items() if k in ROLES)
    return {
        "label": args.label, "rc": rc, "steps": summary["steps"], "samples_scored": scored,
        "samples_trained": summary["samples_trained"], "wall_s": round(wall, 1), "load1_before": round(load, 2),
        "load1_mean": watch.summary()["load1_mean"],
        "train_s_median": round(statistics.median(r["train_s"] for r in steps), 4) if steps else None,
        "train_s_mean": round(statistics.fmean(r["train_s"] for r in steps), 4) if steps else None,
        "wait_s_mean": round(statistics.fmean(r["wait_s"] for r in steps), 4) if steps else None,
        # The learner's loop from its first step to its last: waiting, training and publishing.
        "loop_s": round(sum(r["wait_s"] + r["train_s"] + r.get("publish_s", 0.0) for r in steps), 1),
        "wait_s_median": round(statistics.median(r["wait_s"] for r in steps), 4) if steps else None,
        "cpu_s_by_process": cpu, "prepare_cpu_s": cpu.get("prepare", 0.0),
        "cpu_s_per_1000_samples": per_k,
        "verify_and_nats_share": round((cpu.get("verify", 0) + cpu.get("verify pool worker", 0)
                                        + cpu.get("nats-server", 0)) / total, 3) if total else None,
        "peak_rss_mib": watch.summary()["peak_rss_mib"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--config", default="")
    p.add_argument("--source", default="", help="another checkout of the project to run")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--label", default="")
    p.add_argument("--out", type=Path, default=None, help="append the result as a JSON line here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rlvr-role-cpu-") as tmp:
        result = run_once(args, Path(tmp))
    line = json.dumps(result)
    print(line)
    if args.out:
        with args.out.open("a") as f:
            f.write(line + "\n")
    return 0 if result["rc"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
