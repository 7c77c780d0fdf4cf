"""rlvr-actor against TRL's GRPOTrainer, side by side: the same model, task, reward, settings and machine.

    pip install '.[bench]'
    OMP_NUM_THREADS=1 python bench/vs_trl.py --repeats 3                    # the built-in example's model
    OMP_NUM_THREADS=1 python bench/vs_trl.py --model smollm2 --budget-s 900  # SmolLM2-135M-Instruct

1. The shared starting point: the built-in example's cold-start checkpoint (its preparation step,
   learner/example/prepare.py, run once in a child process: the HF model and tokenizer it exports load
   in both frameworks), or SmolLM2-135M-Instruct converted by scripts/convert_smollm2.py.
2. Interleaved repeats: rlvr-actor (``rlvr-actor up`` on the task's config, bench/vs_trl/run_rlvr.py)
   and TRL (``GRPOTrainer`` with HF generation, bench/vs_trl/run_trl.py), alternating which goes first,
   each for the same wall-time budget with the same thread budget, each keeping timed weight snapshots;
   the load average before each run is recorded.
3. One evaluation function (bench/vs_trl/evaluate.py) scores every snapshot of both on the same
   held-out prompts, afterwards, outside the timed runs.
4. The limit (bench/vs_trl/limit.py): a tight forward+backward loop of the same batch.
5. bench/results/vs_trl.jsonl (one line per run, one summary line) and bench/results/vs_trl.md
   (vs_trl_smollm2.md for ``--model smollm2``).

Not covered: GPUs, vLLM inside TRL, multi-node; TRL's own eval loop (it is not used: both are scored
by the one function here).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from vs_trl import report, run_rlvr, settings  # noqa: E402
from vs_trl.task import REPO, Task, config_path  # noqa: E402
from vs_trl.watch import Watch  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("builtin", "smollm2"), default="builtin")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved runs of each framework")
    ap.add_argument("--budget-s", type=float, help="wall seconds per run (default: 300 builtin, 900 smollm2)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads each framework's step may use")
    ap.add_argument("--keep-every", type=int, help="optimizer steps between snapshots (default 25 / 10)")
    ap.add_argument("--eval-prompts", type=int, help="held-out prompts (default: 500 builtin, 300 smollm2)")
    ap.add_argument("--eval-n", type=int, help="samples per held-out prompt (default: 8 builtin, 4 smollm2)")
    ap.add_argument("--fixed-times", type=float, nargs="+", help="wall seconds to read pass@1 at")
    ap.add_argument("--checkpoint", type=Path, help="start both from this HF folder (skips the preparation)")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "vs_trl", help="run folders and snapshots")
    ap.add_argument("--results", type=Path, default=HERE / "results", help="where vs_trl.jsonl and .md go")
    ap.add_argument("--only", choices=report.FRAMEWORKS, help="run one framework (a smoke check)")
    ap.add_argument("--no-limit", action="store_true", help="skip the tight-loop limit")
    ap.add_argument("--note", default="", help="what else ran on the machine, written beside the loads")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override one key of the task's config for both frameworks, as `up --set` takes it "
                         "(repeatable; TRL takes what it has an equivalent for; the built-in cold start is prepared from "
                         "the unchanged config), e.g. --set learn.dynamic_sampling=false")
    a = ap.parse_args(argv)
    big = a.model == "smollm2"
    a.budget_s = a.budget_s or (900.0 if big else 300.0)
    a.keep_every = a.keep_every or (10 if big else 25)
    a.eval_prompts = a.eval_prompts or (300 if big else 500)
    a.eval_n = a.eval_n or (4 if big else 8)
    a.fixed_times = a.fixed_times or [round(a.budget_s * f) for f in (0.25, 0.5, 0.75, 1.0)]
    for name in ("repeats", "threads", "keep_every", "eval_prompts", "eval_n"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if a.budget_s <= 0:
        ap.error("--budget-s must be positive")
    return a


def checkpoint(args: argparse.Namespace) -> Path:
    """The HF folder both frameworks start from."""
    if args.checkpoint:
        return args.checkpoint
    if args.model == "smollm2":
        path = REPO / "models" / "smollm2-135m-instruct"
        if not (path / "config.json").is_file():
            sys.exit(f"{path} is missing: convert it first (python scripts/convert_smollm2.py {path})")
        return path
    prep = args.work / "prepare"
    info = prep / "prepared.json"
    if not info.is_file():  # the built-in example's preparation step, as `up` runs it: a child process
        prep.mkdir(parents=True, exist_ok=True)
        print(f"[vs_trl] cold start: learner/example/prepare.py into {prep}", flush=True)
        subprocess.run([sys.executable, "-m", "rlvr.learner.example.prepare", "--config", str(config_path("builtin")),
                        "--run-dir", str(prep)], check=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    return Path(json.loads(info.read_text())["model"])


def run_trl(args, model_dir: Path, out: Path, cfg) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    launched = time.time()
    spec = {"model": args.model, "model_dir": str(model_dir), "out": str(out), "threads": args.threads,
            "budget_s": args.budget_s, "launched": launched, "keep_every": args.keep_every,
            "sets": args.set, "trl_args": settings.trl_args(cfg)}
    (out / "spec.json").write_text(json.dumps(spec, indent=1))
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(HERE), "PYTHONUNBUFFERED": "1"}
    with open(out.parent / f"{out.name}.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "vs_trl.run_trl", str(out / "spec.json")], stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
        with Watch(proc.pid) as watch:
            proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"the TRL run failed (exit {proc.returncode}); see {out.parent / f'{out.name}.log'}")
    return {"launched": launched, "exit": proc.returncode, **watch.summary(),
            **json.loads((out / "trl_run.json").read_text())}


def run_one(args, framework: str, repeat: int, model_dir: Path, task) -> dict:
    out = args.work / f"r{repeat}-{framework}"
    if out.exists():  # a fresh folder: an earlier run's weights and step records must not count as this one's
        shutil.rmtree(out)
    load_before = round(os.getloadavg()[0], 2)
    print(f"[vs_trl] repeat {repeat}: {framework}, {args.budget_s:g} s (load {load_before})", flush=True)
    if framework == "rlvr-actor":
        config = run_rlvr.write_config(config_path(args.model), model_dir, out, keep_every=args.keep_every)
        run = run_rlvr.run(config, out / "run", args.budget_s, sets=args.set)
    else:
        run = run_trl(args, model_dir, out, task.cfg)
    return {"framework": framework, "repeat": repeat, "load1_before": load_before, **run}


def evaluate_runs(args, runs: list[dict], model_dir: Path, task) -> float:
    from vs_trl.evaluate import pass_at_1

    kw = {"prompts": args.eval_prompts, "n": args.eval_n}
    base = pass_at_1(model_dir, None, task, **kw)
    print(f"[vs_trl] base pass@1 {base:.4f}", flush=True)
    for run in runs:
        run["curve"] = []
        for s in run["snapshots"]:
            p = pass_at_1(model_dir, Path(s["path"]), task, **kw)
            run["curve"].append({"t": s["t"], "step": s["step"], "pass_at_1": round(p, 4)})
            print(f"[vs_trl] {run['framework']} r{run['repeat']} step {s['step']} t {s['t']:.0f}s pass@1 {p:.4f}",
                  flush=True)
    return base


def mean_lengths(task, runs: list[dict], model_dir: Path) -> tuple[int, int]:
    from transformers import AutoTokenizer

    from rlvr.rollout.engines.base import render_prompt_ids

    tok = AutoTokenizer.from_pretrained(model_dir)
    prompts = task.train[:256]
    prompt_len = round(sum(len(render_prompt_ids(tok, s.prompt)) for s in prompts) / len(prompts))
    gen = [(r["tokens_trained"], r["samples_trained"]) for r in runs if r["samples_trained"]]
    completion_len = round(sum(t for t, _ in gen) / sum(n for _, n in gen)) if gen else task.max_tokens
    return prompt_len, max(1, completion_len)


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("torch", "transformers", "trl", "deepspeed"):
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            out.append(f"{name} (not installed)")
    return ", ".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from rlvr.cli.commands.up import parse_sets

    task = Task.load(args.model, overrides=parse_sets(args.set))
    model_dir = checkpoint(args)
    frameworks = [args.only] if args.only else list(report.FRAMEWORKS)
    runs = []
    for r in range(args.repeats):  # alternate who goes first, so load drifts hit both alike
        for fw in frameworks if r % 2 == 0 else frameworks[::-1]:
            runs.append(run_one(args, fw, r, model_dir, task))
    base = evaluate_runs(args, runs, model_dir, task)
    limit = None
    if not args.no_limit:
        from vs_trl.limit import best_limit

        prompt_len, completion_len = mean_lengths(task, runs, model_dir)
        rows = task.cfg.learn.groups_per_step * task.cfg.learn.group_size
        limit = best_limit(model_dir, rows=rows, prompt_len=prompt_len, completion_len=completion_len,
                              threads=args.threads)
        print(f"[vs_trl] limit {limit}", flush=True)
    limit_tps = limit["tokens_trained_per_s"] if limit else None
    for run in runs:
        run["figures"] = report.figures(run, base, args.fixed_times, limit_tps)
    med = {fw: report.median_figures([r["figures"] for r in runs if r["framework"] == fw]) for fw in frameworks}
    ratio = report.ratios(med["rlvr-actor"], med["trl"]) if len(frameworks) == 2 else {}
    meta = {
        "command": "OMP_NUM_THREADS=1 python bench/vs_trl.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "model": args.model,
        "budget_s": args.budget_s, "repeats": args.repeats, "threads": args.threads,
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, no GPU",
        "loads_before": ", ".join(f"{r['framework']} r{r['repeat']} {r['load1_before']}" for r in runs),
        "shared_note": args.note or "(the load before a run includes the run before it; anything above 2 is "
                                    "other work on the machine, and wall times carry that noise)",
        "sets": args.set, "versions": versions(), "eval_prompts": args.eval_prompts, "eval_n": args.eval_n,
        "temperature": task.temperature, "base_pass_at_1": base,
    }
    if len(frameworks) == 2:
        args.results.mkdir(parents=True, exist_ok=True)
        with open(args.results / "vs_trl.jsonl", "a") as f:
            for run in runs:
                f.write(json.dumps({k: v for k, v in run.items() if k != "snapshots"}) + "\n")
            f.write(json.dumps({"summary": True, **meta, "median": med, "ratio": ratio, "limit": limit}) + "\n")
        md = report.markdown(meta, settings.table(task.cfg), settings.differences(task.cfg), runs, med, ratio, limit)
        (args.results / ("vs_trl.md" if args.model == "builtin" else f"vs_trl_{args.model}.md")).write_text(md)
        print(md)
    else:
        print(json.dumps({"median": med, "limit": limit}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
