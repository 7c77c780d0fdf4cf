"""Plot runs side by side: held-out pass@1 at each evaluation round, and the training reward, against the step.

    python bench/compare_runs.py LABEL=RUN_DIR [LABEL=RUN_DIR ...] --out docs/random-control.png

Reads each run's ``metrics.jsonl`` (step records and ``"event": "eval"``
records) and prints, per run, the held-out pass@1 of every round and the
mean training reward of the first and last 20 steps, then draws both panels
to ``--out``. Used for the random-reward control and for process against
outcome rewards (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def read(run_dir: Path) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    evals, steps = [], []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("event") == "eval" and "pass_at_1" in rec:
            evals.append((int(rec["step"]), float(rec["pass_at_1"])))
        elif "loss" in rec and "reward_mean" in rec:
            steps.append((int(rec["step"]), float(rec["reward_mean"])))
    return evals, steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="LABEL=RUN_DIR")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for item in args.runs:
        label, _, path = item.partition("=")
        evals, steps = read(Path(path))
        rounds = ", ".join(f"step {s}: {100 * p:.1f}%" for s, p in evals)
        first = statistics.fmean(r for _, r in steps[:20]) if steps else float("nan")
        last = statistics.fmean(r for _, r in steps[-20:]) if steps else float("nan")
        print(f"{label}: held-out pass@1 {rounds}; training reward {first:.3f} (first 20 steps) -> {last:.3f} (last 20)")
        a.plot([s for s, _ in evals], [p for _, p in evals], marker="o", label=label)
        window = 10
        smooth = [statistics.fmean(r for _, r in steps[max(0, i - window + 1):i + 1]) for i in range(len(steps))]
        b.plot([s for s, _ in steps], smooth, label=label)
    a.set_xlabel("step")
    a.set_ylabel("held-out pass@1")
    a.set_ylim(0, 1)
    a.grid(True, alpha=0.3)
    a.legend()
    b.set_xlabel("step")
    b.set_ylabel("training reward (10-step mean, kept groups)")
    b.grid(True, alpha=0.3)
    b.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"plot: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
