"""The curriculum against none on the built-in example: same seed, same cold start, same budget.

    OMP_NUM_THREADS=1 .venv/bin/python bench/curriculum_vs_none.py --steps 60 --work /tmp/curriculum

Prepares the built-in example's model once (its cold-start SFT, learner/example/prepare.py, with the
built-in config's seed) and starts `rlvr-actor up` from that model once per `learn.curriculum`
(`none`, `by_level`: 1-digit problems first, the dataset's levels; `pass_rate`: prompts the policy
sometimes solves first), with the same seed, steps and held-out rounds. Writes each run's held-out
pass@1 by step, its wall time and the load average before and after to
``bench/results/curriculum.json``, and prints a Markdown table. Wall times on a shared machine
move with its load: compare steps, and read the load beside the seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = ROOT / "cli" / "builtin.toml"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--eval-prompts", type=int, default=200)
    ap.add_argument("--eval-n", type=int, default=4)
    ap.add_argument("--curricula", default="none,by_level,pass_rate")
    ap.add_argument("--work", default="/tmp/curriculum")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "curriculum.json"))
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    model = work / "prep" / "model"
    if not (work / "prep" / "prepared.json").exists():
        subprocess.run([sys.executable, "-m", "rlvr.learner.example.prepare", "--config", str(BUILTIN),
                        "--run-dir", str(work / "prep")], check=True, env=env)
    prepared = json.loads((work / "prep" / "prepared.json").read_text())
    runs = []
    for curriculum in args.curricula.split(","):
        raw = msgspec.toml.decode(BUILTIN.read_bytes())
        raw["learn"].pop("prepare")
        raw["rollout"]["engine"]["model"] = str(model)
        raw["learn"]["engine"]["model_path"] = str(model)
        raw["learn"].update(steps=args.steps, curriculum=curriculum)
        raw["learn"]["eval"].update(prompts=args.eval_prompts, n=args.eval_n, ks=[1], every_steps=args.eval_every)
        config = work / f"{curriculum}.json"
        config.write_bytes(msgspec.json.encode(raw))
        run_dir = work / curriculum
        load_before = os.getloadavg()
        started = time.monotonic()
        rc = subprocess.run([sys.executable, "-m", "rlvr.cli", "up", "--config", str(config), "--run-dir",
                             str(run_dir), "--display", "plain"], env=env,
                            stdout=open(work / f"{curriculum}.out", "w"), stderr=subprocess.STDOUT).returncode
        summary = json.loads((run_dir / "summary.json").read_text())
        runs.append({
            "curriculum": curriculum, "exit_code": rc, "steps": summary.get("steps"),
            "pass_at_1": {e["step"]: e["pass_at_1"] for e in summary.get("evals", [])},
            "wall_seconds": round(time.monotonic() - started, 1),
            "load_before": [round(x, 1) for x in load_before], "load_after": [round(x, 1) for x in os.getloadavg()],
        })
        print(json.dumps(runs[-1]), flush=True)
    result = {"command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "seed": 0, "cold_start": prepared,
              "runs": runs}
    Path(args.out).write_text(json.dumps(result, indent=2))
    steps = sorted({s for r in runs for s in r["pass_at_1"]}, key=int)
    print("| curriculum | " + " | ".join(f"pass@1 step {s}" for s in steps) + " | wall s | load (1 min) before/after |")
    print("| --- |" + " --- |" * (len(steps) + 2))
    for r in runs:
        cells = [f"{100 * r['pass_at_1'][s]:.1f}%" if s in r["pass_at_1"] else "" for s in steps]
        print(f"| {r['curriculum']} | " + " | ".join(cells) + f" | {r['wall_seconds']:.0f} | "
              f"{r['load_before'][0]} / {r['load_after'][0]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
