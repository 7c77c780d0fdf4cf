"""The built-in example's recipe in one process, without the bus: for tuning it fast.

A full `rlvr-actor up` takes ~10 minutes on 2 cores; most of that is moving
~600 messages per step between processes. This script runs the same recipe
in a single process at ~4 steps/s: the built-in config (actors/builtin.toml)
with the command line's changes, the preparation step `up` runs (model build
and cold-start SFT, learner/example/prepare.py), the learner's DeepSpeed engine with
that config's engine settings for GRPO, the config's verifier called in
process (exact match + 0.2 format), dynamic sampling, clip-higher, T=1,
so a choice of learning rate, model or warm-up target can be tried in 3-5
minutes. It prints one JSON line per SFT check, per 25 RL steps and per
evaluation (held-out pass@1 and pass@8 over 8 samples at T=1, the same
figure `up` reports), and writes them to ``<out>/log.jsonl``.

    OMP_NUM_THREADS=2 .venv/bin/python bench/example_recipe.py --out /tmp/recipe

Differences from `up`, on purpose: generation is strictly on-policy (no
staleness, no importance correction), and a step trains on the groups of its
B prompts that have reward variance rather than waiting for B such groups.
The figures it gives are therefore a guide, not the example's result; the
README's numbers come from `rlvr-actor up`.

Not covered: the bus, the rollout and verifier actors, checkpoints.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="run dir for the models and log.jsonl")
    ap.add_argument("--tie-embeddings", action="store_true", help="learn.prepare.tie_embeddings = true")
    ap.add_argument("--hidden", type=int, help="learn.prepare.hidden (the model's width)")
    ap.add_argument("--layers", type=int, help="learn.prepare.layers")
    ap.add_argument("--heads", type=int, help="learn.prepare.heads (hidden / heads must be a head size vLLM's CPU attention takes: 32, 64...)")
    ap.add_argument("--sft-lr", type=float, help="learn.prepare.sft_lr")
    ap.add_argument("--sft-target", type=float, help="learn.prepare.sft_target_pass_at_1")
    ap.add_argument("--sft-model", type=Path, help="skip the warm-up and start RL from this HF folder")
    ap.add_argument("--lr", type=float, help="learn.engine.optimizer.lr")
    ap.add_argument("--groups", type=int, help="learn.groups_per_step (B)")
    ap.add_argument("--group-size", type=int, help="learn.group_size (G)")
    ap.add_argument("--steps", type=int, help="learn.steps")
    ap.add_argument("--ppo-epochs", type=int, help="learn.engine.ppo_epochs")
    ap.add_argument("--eval-every", type=int, default=100, help="RL steps between evaluations")
    return ap.parse_args(argv)


def load_recipe(args: argparse.Namespace):
    """The built-in config with the command line's changes (validated like any config)."""
    from rlvr.cli.run_config import load_config
    from rlvr.cli.commands.up import builtin_config_path

    chosen = {
        "learn.prepare.tie_embeddings": args.tie_embeddings or None,
        "learn.prepare.hidden": args.hidden,
        "learn.prepare.layers": args.layers,
        "learn.prepare.heads": args.heads,
        "learn.prepare.sft_lr": args.sft_lr,
        "learn.prepare.sft_target_pass_at_1": args.sft_target,
        "learn.engine.optimizer.lr": args.lr,
        "learn.groups_per_step": args.groups,
        "learn.group_size": args.group_size,
        "learn.steps": args.steps,
        "learn.engine.ppo_epochs": args.ppo_epochs,
    }
    return load_config(builtin_config_path(), overrides={k: v for k, v in chosen.items() if v is not None})


class Recipe:
    def __init__(self, cfg, out: Path, eval_every: int) -> None:
        from rlvr.learner.data.datasets import load_splits

        self.cfg, self.out, self.eval_every = cfg, out, eval_every
        out.mkdir(parents=True, exist_ok=True)
        self.log_file = open(out / "log.jsonl", "w", buffering=1)  # noqa: SIM115 (closed in main)
        self.t0 = time.monotonic()
        self.splits = load_splits(cfg.learn.dataset, seed=cfg.seed)

    def emit(self, **record) -> None:
        record["t"] = round(time.monotonic() - self.t0, 1)
        line = json.dumps(record)
        print(line, flush=True)
        self.log_file.write(line + "\n")

    def warm_up(self) -> Path:
        """The preparation step `up` runs, as it runs it."""
        from rlvr.learner.example.prepare import prepare_tiny_arithmetic

        info = prepare_tiny_arithmetic(self.cfg, self.out, log=lambda line: self.emit(phase="sft", line=line))
        self.emit(phase="sft_done", **info)
        return Path(info["model"])

    def sample(self, model, tok, specs, n: int) -> list[tuple[list[int], list[int], list[float], float, bool]]:
        """n completions per task at the config's sampling temperature:
        (prompt ids, completion ids, log-probs, reward, correct)."""
        import torch

        from rlvr.verify.registry import VerifyContext, resolve

        sampling = self.cfg.learn.sampling
        rows = [tok(s.prompt)["input_ids"] for s in specs for _ in range(n)]
        width = max(map(len, rows))
        pad, eos = tok.pad_token_id, tok.eos_token_id
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        model.eval()
        with torch.no_grad():
            res = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=sampling.temperature,
                                 top_k=0, top_p=1.0, max_new_tokens=sampling.max_tokens, eos_token_id=eos,
                                 pad_token_id=pad, output_scores=True, return_dict_in_generate=True)
        model.train()
        new = res.sequences[:, width:]
        logp = torch.log_softmax(torch.stack(res.scores, 1).float(), -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        verifiers = [resolve(s.verifier) for s in specs]
        out = []
        for i, (row, toks, lps) in enumerate(zip(rows, new.tolist(), logp.tolist())):
            if eos in toks:
                cut = toks.index(eos) + 1
                toks, lps = toks[:cut], lps[:cut]
            verdict = verifiers[i // n](tok.decode(toks, skip_special_tokens=True),
                                        VerifyContext(completion_tokens=len(toks), max_tokens=sampling.max_tokens))
            correct = verdict.components.get("accuracy", verdict.reward) > 0
            out.append((row, toks, lps, verdict.reward, correct))
        return out

    def evaluate(self, model, tok, step: int) -> None:
        held, n = self.splits.heldout, self.cfg.learn.eval.n
        outs = self.sample(model, tok, held, n)
        per_prompt = [sum(o[4] for o in outs[i * n:(i + 1) * n]) for i in range(len(held))]
        self.emit(phase="eval", step=step, pass_at_1=sum(per_prompt) / len(outs),
                  **{f"pass_at_{n}": sum(c > 0 for c in per_prompt) / len(per_prompt)})

    def grpo(self, model_path: Path) -> None:
        import msgspec
        import torch
        from transformers import AutoTokenizer

        from rlvr.learner.algos.advantages import compute_advantages
        from rlvr.learner.train.batching import TrainBatchItem
        from rlvr.learner.train.engine import LearnerEngine

        learn = self.cfg.learn
        engine_cfg = msgspec.structs.replace(learn.engine, model_path=str(model_path))
        eng = LearnerEngine(engine_cfg, seed=self.cfg.seed)
        tok = AutoTokenizer.from_pretrained(model_path)
        model = eng.ds.module
        self.evaluate(model, tok, 0)
        rng = random.Random(self.cfg.seed + 1)
        for step in range(1, learn.steps + 1):
            batch = rng.sample(self.splits.train, learn.groups_per_step)
            outs = self.sample(model, tok, batch, learn.group_size)
            items, kept = [], 0
            for g in range(len(batch)):
                group = outs[g * learn.group_size:(g + 1) * learn.group_size]
                rewards = torch.tensor([o[3] for o in group], dtype=torch.float32)
                if float(rewards.std()) <= learn.zero_variance_eps:
                    continue  # dynamic sampling: no signal in this group
                kept += 1
                for o, adv in zip(group, compute_advantages(rewards, engine_cfg.advantage).tolist()):
                    items.append(TrainBatchItem(o[0], o[1], o[2], adv, f"{step}/{g}"))
            metrics = eng.train_step(items) if items else {}
            if step % 25 == 0:
                self.emit(phase="rl", step=step, reward_mean=round(sum(o[3] for o in outs) / len(outs), 4),
                          kept_groups=kept, entropy=round(metrics.get("entropy", float("nan")), 4))
            if step % self.eval_every == 0:
                self.evaluate(model, tok, step)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    recipe = Recipe(load_recipe(args), args.out, args.eval_every)
    try:
        recipe.grpo(args.sft_model or recipe.warm_up())
    finally:
        recipe.log_file.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
