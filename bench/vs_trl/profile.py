"""Where an rlvr-actor run's time went, from what ``up`` already leaves behind (no profiler attached).

- ``span_totals``: per role, each span name's count and total seconds, from the file traces
  (``[observability] trace_exporter = "file"``, ``<run>/traces/<role>-<replica>.jsonl``). ``learn.step``
  and ``rollout.generate`` are recorded for every step or batch; per-trajectory spans (``verify.score``,
  ``feeder.task``) only for the head-sampled share, so their totals are a sample, not the whole.
- ``breakdown``: the learner's wall time split into start-up (launch to the first step's start), the
  step records' ``train_s`` / ``wait_s`` / ``publish_s``, and what is left (the learner loop's own work
  between steps, the stop), next to the CPU seconds each process used (``Watch``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path


def span_totals(run_dir: Path) -> dict[str, dict[str, dict]]:
    out: dict[str, dict[str, dict]] = {}
    for path in sorted(Path(run_dir).rglob("traces/*.jsonl")):
        acc: dict[str, list] = defaultdict(lambda: [0, 0.0, None])
        for line in path.read_text(errors="replace").splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if not isinstance(r, dict) or "start_ns" not in r or "end_ns" not in r or "name" not in r:
                continue
            a = acc[r["name"]]
            a[0] += 1
            a[1] += (r["end_ns"] - r["start_ns"]) / 1e9
            a[2] = r["start_ns"] if a[2] is None else min(a[2], r["start_ns"])
        out[path.stem] = {k: {"n": n, "total_s": round(s, 2), "first_ns": first} for k, (n, s, first) in acc.items()}
    return out


def breakdown(run: dict, spans: dict, launched: float) -> dict:
    """The learner's wall time by phase (seconds) and the mean of each per-step phase."""
    learn = next((v for k, v in spans.items() if k.startswith("learn")), {})
    first = learn.get("learn.step", {}).get("first_ns")
    startup = round(first / 1e9 - launched, 2) if first else None
    steps = max(run.get("steps") or 0, 1)
    phases = {"startup_s": startup, "train_s": run["train_s"], "wait_s": run["wait_s"],
              "publish_s": run["publish_s"]}
    known = sum(v for v in phases.values() if v)
    phases["other_s"] = round(run["wall_s"] - known, 2)
    per_step = {k.replace("_s", "_per_step_s"): round(run[k] / steps, 3) for k in ("train_s", "wait_s", "publish_s")}
    gen = next((v.get("rollout.generate") for k, v in spans.items() if k.startswith("rollout")), None)
    if gen and gen["n"]:
        per_step["generate_per_call_s"] = round(gen["total_s"] / gen["n"], 3)
    return {**phases, **per_step}


def main(argv: list[str] | None = None) -> int:
    """``python -m vs_trl.profile [RESULTS_JSONL] [WORK]``: the breakdown of each rlvr-actor run recorded."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    bench = Path(__file__).resolve().parents[1]
    results = Path(argv[0]) if argv else bench / "results" / "vs_trl.jsonl"
    work = Path(argv[1]) if len(argv) > 1 else bench.parent / "runs" / "vs_trl"
    for line in results.read_text().splitlines():
        run = json.loads(line)
        if run.get("framework") != "rlvr-actor":
            continue
        run_dir = work / f"r{run['repeat']}-rlvr-actor" / "run"
        spans = span_totals(run_dir)
        print(json.dumps({"repeat": run["repeat"], "breakdown": breakdown(run, spans, run["launched"]),
                          "cpu_s_by_process": run.get("cpu_s_by_process"),
                          "spans": {k: {n: {"n": s["n"], "total_s": s["total_s"]} for n, s in v.items()}
                                    for k, v in spans.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
