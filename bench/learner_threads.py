"""`up.learner_threads` 1 against 2 on the built-in example: one prepared model, runs alternating.

    OMP_NUM_THREADS=1 .venv/bin/python bench/learner_threads.py --steps 30 --work /tmp/curriculum

Prepares the built-in example's cold start once (as bench/curriculum_vs_none.py does, and reuses
its `<work>/prep` when there), then starts `rlvr-actor up` from that model with
`up.learner_threads` = 1, 2, 1, 2 (alternating, so a shared machine's load falls on both), the same
seed and steps, held-out rounds only before and after. Prints one JSON line per run: wall time,
the learner's wall time, the sum of the steps' `train_s` (the optimizer steps), pass@1 before and
after, and the load average before. On 2 cores the rollout generates the next batch on one core
while the learner trains (`max_staleness = 1`), so a second OpenMP thread in the learner competes
with it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = ROOT / "cli" / "builtin.toml"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--order", default="1,2,1,2", help="learner_threads of each run, in order")
    ap.add_argument("--work", default="/tmp/curriculum")
    args = ap.parse_args()
    work = Path(args.work)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    model = work / "prep" / "model"
    if not (work / "prep" / "prepared.json").exists():
        subprocess.run([sys.executable, "-m", "rlvr.learner.example.prepare", "--config", str(BUILTIN),
                        "--run-dir", str(work / "prep")], check=True, env=env)
    raw = msgspec.toml.decode(BUILTIN.read_bytes())
    raw["learn"].pop("prepare")
    raw["rollout"]["engine"]["model"] = str(model)
    raw["learn"]["engine"]["model_path"] = str(model)
    raw["learn"]["steps"] = args.steps
    raw["learn"]["eval"].update(every_steps=0)
    for rep, threads in enumerate(int(t) for t in args.order.split(",")):
        raw["up"]["learner_threads"] = threads
        config = work / f"threads-{rep}.json"
        config.write_bytes(msgspec.json.encode(raw))
        run = work / f"threads-run-{rep}"
        shutil.rmtree(run, ignore_errors=True)
        load = os.getloadavg()[0]
        started = time.monotonic()
        rc = subprocess.run([sys.executable, "-m", "rlvr.cli", "up", "--config", str(config), "--display", "plain",
                             "--run-dir", str(run)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL).returncode
        wall = time.monotonic() - started
        summary = json.loads((run / "summary.json").read_text())
        steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"train_s"' in line]
        print(json.dumps({
            "threads": threads, "exit_code": rc, "load_before": round(load, 1), "wall_s": round(wall, 1),
            "learner_wall_s": round(summary.get("learner_wall_seconds", 0.0), 1),
            "train_s_sum": round(sum(s.get("train_s", 0.0) for s in steps), 1),
            "pass_at_1_before": summary.get("pass_at_1_before"), "pass_at_1_after": summary.get("pass_at_1_after"),
        }), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
