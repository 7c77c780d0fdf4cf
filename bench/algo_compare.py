"""PPO (a critic, GAE) against GRPO against DAPO on the built-in example, in one process each.

The recipe of bench/example_recipe.py (the built-in config, its cold-start SFT, sampling and the
config's verifier in process, the learner's DeepSpeed engine), with one cold start shared by all
three algorithms, each trained for the same number of steps on the same prompts (same seed, B
prompts x G samples per step), one algorithm at a time in a fresh process (a clean peak-memory
reading), in the order given, interleaved over repeats:

- ``grpo``: group-standardised advantages, PPO clip 0.2 / 0.2, every sequence weighed the same
  (seq-mean-token-mean), every group trained (no dynamic sampling): DeepSeekMath's GRPO.
- ``dapo``: the built-in config as it ships: clip-higher 0.2 / 0.28, token-mean, dynamic sampling.
- ``ppo``: ``advantage.name = "gae"`` (γ 1, λ 0.95, whitened), the value head (lr ``--critic-lr``,
  value clip 0.2, loss weight 0.5, ``--critic-warmup`` warm-up steps), clip 0.2 / 0.2, token-mean,
  every group trained (the critic learns from all-equal groups too).

Held-out pass@1 (500 problems x 8 samples at T=1, as `up` reports it) every ``--eval-every``
steps, with the wall time since the algorithm's start; per step, the learner's step time; per
run, the learner process's peak resident memory during RL (VmHWM, reset after the model is
built) and the load average. Writes ``<out>/<algo>-r<k>.jsonl`` and a summary line per run to
bench/results/algo_compare.jsonl; ``--plot`` draws the figure from those files.

    OMP_NUM_THREADS=1 .venv/bin/python bench/algo_compare.py --out /tmp/algos --steps 200 --eval-every 50
    .venv/bin/python bench/algo_compare.py --out /tmp/algos --plot docs/ppo-grpo-dapo.png

Not covered: the bus (runs are on-policy, as in example_recipe.py), GPU memory.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results" / "algo_compare.jsonl"
ALGOS = ("ppo", "grpo", "dapo")


def engine_config(engine, algo: str, args: argparse.Namespace):
    import msgspec

    from rlvr.learner.algos.config import AdvantageConfig, CriticConfig

    loss = engine.loss
    if algo == "grpo":
        return msgspec.structs.replace(engine, advantage=AdvantageConfig(name="grpo"), loss=msgspec.structs.replace(
            loss, eps_low=0.2, eps_high=0.2, aggregation="seq-mean-token-mean"))
    if algo == "dapo":
        return engine
    critic = CriticConfig(lr=args.critic_lr, value_clip=0.2, loss_coef=0.5, warmup_steps=args.critic_warmup)
    return msgspec.structs.replace(
        engine, advantage=AdvantageConfig(name="gae", gamma=1.0, lam=0.95, whiten=True, critic=critic),
        loss=msgspec.structs.replace(loss, eps_low=0.2, eps_high=0.2, aggregation="token-mean"))


def _rss(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def run_one(algo: str, model_path: Path, out_file: Path, args: argparse.Namespace) -> dict:
    """Train ``algo`` from the cold-start model; one JSON line per eval and a summary."""
    import msgspec
    import torch
    from example_recipe import Recipe, load_recipe
    from transformers import AutoTokenizer

    from rlvr.learner.algos.advantages import compute_advantages
    from rlvr.learner.train.batching import TrainBatchItem
    from rlvr.learner.train.engine import LearnerEngine

    cfg = load_recipe(argparse.Namespace(**{k: None for k in (
        "tie_embeddings", "hidden", "layers", "heads", "sft_lr", "sft_target", "lr", "groups", "group_size",
        "steps", "ppo_epochs")}))
    recipe = Recipe(cfg, out_file.parent / f".{out_file.stem}", args.eval_every)
    learn = cfg.learn
    ecfg = engine_config(msgspec.structs.replace(learn.engine, model_path=str(model_path)), algo, args)
    eng = LearnerEngine(ecfg, seed=cfg.seed)
    tok = AutoTokenizer.from_pretrained(model_path)
    model = eng.ds.module
    log = out_file.open("w")
    base = _rss("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here: the RL phase only
    started = time.monotonic()
    rl_s = 0.0  # time outside the evaluations

    def evaluate(step: int) -> None:
        held, n = recipe.splits.heldout, learn.eval.n
        outs = recipe.sample(model, tok, held, n)
        per_prompt = [sum(o[4] for o in outs[i * n:(i + 1) * n]) for i in range(len(held))]
        rec = {"algo": algo, "step": step, "pass_at_1": sum(per_prompt) / len(outs), "rl_s": round(rl_s, 1),
               f"pass_at_{n}": sum(c > 0 for c in per_prompt) / len(per_prompt),
               "wall_s": round(time.monotonic() - started, 1)}
        log.write(json.dumps(rec) + "\n")
        log.flush()
        print(json.dumps(rec), flush=True)

    evaluate(0)
    rng = random.Random(cfg.seed + 1)  # the same prompts, in the same order, for every algorithm
    step_times, trained, rewards = [], 0, []
    dynamic = algo == "dapo"
    for step in range(1, args.steps + 1):
        t0 = time.monotonic()
        batch = rng.sample(recipe.splits.train, learn.groups_per_step)
        outs = recipe.sample(model, tok, batch, learn.group_size)
        items = []
        for g in range(len(batch)):
            group = outs[g * learn.group_size:(g + 1) * learn.group_size]
            r = torch.tensor([o[3] for o in group], dtype=torch.float32)
            if dynamic and float(r.std()) <= learn.zero_variance_eps:
                continue
            advs = [0.0] * len(group) if algo == "ppo" else compute_advantages(r, ecfg.advantage).tolist()
            for i, (o, adv) in enumerate(zip(group, advs)):
                items.append(TrainBatchItem(o[0], o[1], o[2], adv, f"{step}/{g}/{i}", reward=o[3]))
        rewards.append(sum(o[3] for o in outs) / len(outs))
        if items:
            m = eng.train_step(items)
            step_times.append(m["step_time_s"])
            trained += len(items)
            if step % 25 == 0:
                keep = ("loss", "value_loss", "explained_variance", "value_mean", "return_mean", "entropy",
                        "clip_frac", "grad_norm")
                print(json.dumps({"algo": algo, "step": step, "reward_mean": round(rewards[-1], 4),
                                  **{k: round(m[k], 4) for k in keep if k in m}}), flush=True)
        rl_s += time.monotonic() - t0
        if step % args.eval_every == 0:
            evaluate(step)
    peak = _rss("VmHWM") - base
    summary = {"algo": algo, "steps": args.steps, "samples_trained": trained,
               "step_time_s_median": round(statistics.median(step_times), 4) if step_times else None,
               "rl_s": round(rl_s, 1), "wall_s": round(time.monotonic() - started, 1),
               "peak_rss_rise_mib": round(peak / 2**20, 1), "loadavg_1m_end": os.getloadavg()[0],
               "reward_first20": round(statistics.fmean(rewards[:20]), 4),
               "reward_last20": round(statistics.fmean(rewards[-20:]), 4)}
    log.write(json.dumps({"summary": summary}) + "\n")
    log.close()
    eng.close()
    return summary


def plot(out: Path, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"ppo": "tab:red", "grpo": "tab:blue", "dapo": "tab:green"}
    for f in sorted(out.glob("*-r*.jsonl")):
        rows = [json.loads(line) for line in f.read_text().splitlines()]
        evals = [r for r in rows if "pass_at_1" in r]
        if not evals:
            continue
        algo, repeat = evals[0]["algo"], int(f.stem.rsplit("-r", 1)[1])
        # Repeats of GRPO and DAPO sample the same (seeded, deterministic): their lines overlap in pass@1.
        kw = {"color": colors.get(algo), "marker": "o", "label": f.stem, "linestyle": ("-", "--", ":")[repeat % 3]}
        ax1.plot([e["step"] for e in evals], [e["pass_at_1"] for e in evals], **kw)
        ax2.plot([e["rl_s"] for e in evals], [e["pass_at_1"] for e in evals], **kw)
    ax1.set_xlabel("RL step")
    ax2.set_xlabel("training time, s (evaluations excluded)")
    for ax in (ax1, ax2):
        ax.set_ylabel("held-out pass@1 (500 x 8, T=1)")
        ax.grid(alpha=0.3)
    ax1.legend()
    fig.suptitle("Built-in example: PPO (critic) vs GRPO vs DAPO from one cold start")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--algos", default=",".join(ALGOS), help="comma-separated, run in this order")
    ap.add_argument("--repeats", type=int, default=1, help="each repeat runs the algorithms in reverse order")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--critic-lr", type=float, default=1e-3)
    ap.add_argument("--critic-warmup", type=int, default=10)
    ap.add_argument("--plot", type=Path, help="draw the figure from --out's files and exit")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.plot:
        plot(args.out, args.plot)
        return 0
    if args.child:
        print("SUMMARY " + json.dumps(run_one(args.child, args.model, args.file, args)), flush=True)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    model = args.out / "sft_model"
    if not (model / "config.json").exists():
        from example_recipe import Recipe, load_recipe

        cfg = load_recipe(argparse.Namespace(**{k: None for k in (
            "tie_embeddings", "hidden", "layers", "heads", "sft_lr", "sft_target", "lr", "groups", "group_size",
            "steps", "ppo_epochs")}))
        warm = Recipe(cfg, args.out / "sft", args.eval_every).warm_up()
        os.symlink(warm.resolve(), model)
    algos = args.algos.split(",")
    for r in range(args.repeats):
        for algo in algos if r % 2 == 0 else algos[::-1]:
            load = os.getloadavg()
            cmd = [sys.executable, __file__, "--child", algo, "--model", str(model), "--out", str(args.out),
                   "--file", str(args.out / f"{algo}-r{r}.jsonl"), "--steps", str(args.steps),
                   "--eval-every", str(args.eval_every), "--critic-lr", str(args.critic_lr),
                   "--critic-warmup", str(args.critic_warmup)]
            lines = []
            # The cold start above initialised torch.distributed here: each child picks a port of its own.
            env = {k: v for k, v in os.environ.items() if k != "MASTER_PORT"}
            with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) as proc:
                assert proc.stdout is not None
                for x in proc.stdout:  # the child's progress, as it comes
                    print(x, end="", flush=True)
                    lines.append(x.strip())
            if proc.returncode:
                raise RuntimeError(f"{algo} failed with exit code {proc.returncode}")
            line = next(x for x in lines[::-1] if x.startswith("SUMMARY "))
            summary = {**json.loads(line[len("SUMMARY "):]), "repeat": r, "loadavg_1m_start": load[0]}
            print(json.dumps(summary), flush=True)
            with RESULTS.open("a") as f:
                f.write(json.dumps({"when": time.strftime("%Y-%m-%dT%H:%M:%S"), **summary}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
