"""The built-in example's recipe in one process, without the bus: for tuning it fast.

A full `rlvr-actor up` takes ~10 minutes on 2 cores; most of that is moving
~600 messages per step between processes. This script runs the same recipe
(the same tiny model builder, the learner's DeepSpeed engine for both the
cold-start SFT and GRPO, the same dataset split, exact match + a 0.2 format
reward, dynamic sampling, clip-higher, T=1) in a single process at ~4 steps/s,
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
import re
import shutil
import sys
import time
from pathlib import Path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the models and log.jsonl")
    ap.add_argument("--seed", type=int, default=0)
    m = ap.add_argument_group("model")
    m.add_argument("--hidden", type=int, default=128)
    m.add_argument("--layers", type=int, default=3)
    m.add_argument("--heads", type=int, default=4)
    m.add_argument("--tie-embeddings", action="store_true")
    s = ap.add_argument_group("cold-start SFT")
    s.add_argument("--sft-lr", type=float, default=1e-3)
    s.add_argument("--sft-target", type=float, default=0.2, help="stop at this greedy pass@1 (200 held-out)")
    s.add_argument("--sft-max-steps", type=int, default=2000)
    s.add_argument("--sft-check-every", type=int, default=25)
    s.add_argument("--sft-model", type=Path, help="skip SFT and start RL from this HF folder")
    r = ap.add_argument_group("GRPO")
    r.add_argument("--lr", type=float, default=1e-4)
    r.add_argument("--groups", type=int, default=32, help="B prompts per step")
    r.add_argument("--group-size", type=int, default=8, help="G samples per prompt")
    r.add_argument("--steps", type=int, default=600)
    r.add_argument("--ppo-epochs", type=int, default=1)
    r.add_argument("--eval-every", type=int, default=100)
    return ap.parse_args(argv)


class Recipe:
    def __init__(self, args: argparse.Namespace) -> None:
        import msgspec
        from transformers import AutoTokenizer

        from rlvr.learner.arith_model import build_arith_model
        from rlvr.learner.config import ArithmeticDataset
        from rlvr.learner.datasets import load_splits

        self.args = args
        args.out.mkdir(parents=True, exist_ok=True)
        self.log_file = open(args.out / "log.jsonl", "w", buffering=1)  # noqa: SIM115 (closed in main)
        self.t0 = time.monotonic()
        self.init_dir = build_arith_model(
            args.out / "init", hidden=args.hidden, layers=args.layers, heads=args.heads, seed=args.seed,
            tie_embeddings=args.tie_embeddings,
        )
        self.tok = AutoTokenizer.from_pretrained(self.init_dir)
        dataset = msgspec.convert({"kind": "arithmetic"}, ArithmeticDataset)  # the built-in example's split
        self.splits = load_splits(dataset, seed=args.seed)

    def emit(self, **record) -> None:
        record["t"] = round(time.monotonic() - self.t0, 1)
        line = json.dumps(record)
        print(line, flush=True)
        self.log_file.write(line + "\n")

    def engine(self, model_path: Path, lr: float, **extra):
        from rlvr.learner.engine import LearnerEngine
        from rlvr.learner.engine_config import EngineConfig, OptimizerConfig

        cfg = EngineConfig(model_path=str(model_path), zero_stage=0, optimizer=OptimizerConfig(lr=lr, betas=(0.9, 0.99)),
                           grad_clip=1.0, pad_token_id=self.tok.pad_token_id, **extra)
        return LearnerEngine(cfg, seed=self.args.seed)

    def sft(self) -> Path:
        from rlvr.learner.engine_config import ConstantSchedule
        from rlvr.learner.greedy import greedy_accuracy

        a = self.args
        eng = self.engine(self.init_dir, a.sft_lr, schedule=ConstantSchedule(warmup_steps=50), micro_batch_tokens=1 << 16)
        check = self.splits.heldout[:200]
        rng = random.Random(a.seed)
        for step in range(1, a.sft_max_steps + 1):
            batch = rng.sample(self.splits.train, 128)
            pairs = [(self.tok(s.prompt)["input_ids"], self.tok(s.reference)["input_ids"] + [self.tok.eos_token_id])
                     for s in batch]
            loss = eng.sft_step(pairs)["loss"]
            if step % a.sft_check_every == 0:
                acc = greedy_accuracy(eng.ds.module, self.tok, [s.prompt for s in check], [s.reference for s in check], 7)
                self.emit(phase="sft", step=step, loss=round(loss, 4), greedy_pass_at_1=acc)
                if acc >= a.sft_target:
                    break
        out = a.out / "sft"
        eng.export_weights(out)
        for f in self.init_dir.iterdir():
            if not f.name.endswith(".safetensors"):
                shutil.copy(f, out / f.name)
        eng.close()
        return out

    def sample(self, model, prompts: list[str], n: int) -> list[tuple[list[int], list[int], list[float], str]]:
        """n completions per prompt at T=1: (prompt ids, completion ids, log-probs, text)."""
        import torch

        rows = [self.tok(p)["input_ids"] for p in prompts for _ in range(n)]
        width = max(map(len, rows))
        pad, eos = self.tok.pad_token_id, self.tok.eos_token_id
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        model.eval()
        with torch.no_grad():
            res = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                                 top_p=1.0, max_new_tokens=7, eos_token_id=eos, pad_token_id=pad,
                                 output_scores=True, return_dict_in_generate=True)
        model.train()
        new = res.sequences[:, width:]
        logp = torch.log_softmax(torch.stack(res.scores, 1).float(), -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        out = []
        for row, toks, lps in zip(rows, new.tolist(), logp.tolist()):
            if eos in toks:
                cut = toks.index(eos) + 1
                toks, lps = toks[:cut], lps[:cut]
            out.append((row, toks, lps, self.tok.decode(toks, skip_special_tokens=True)))
        return out

    def evaluate(self, model, step: int) -> None:
        held = self.splits.heldout
        outs = self.sample(model, [s.prompt for s in held], 8)
        right = [o[3].strip() == held[i // 8].reference for i, o in enumerate(outs)]
        per_prompt = [sum(right[i * 8:(i + 1) * 8]) for i in range(len(held))]
        self.emit(phase="eval", step=step, pass_at_1=sum(right) / len(right),
                  pass_at_8=sum(c > 0 for c in per_prompt) / len(per_prompt))

    def grpo(self, model_path: Path) -> None:
        import msgspec
        import torch

        from rlvr.learner.algos.advantages import compute_advantages
        from rlvr.learner.algos.config import AdvantageConfig, PolicyLossConfig
        from rlvr.learner.batching import TrainBatchItem

        a = self.args
        loss_cfg = msgspec.convert({"eps_low": 0.2, "eps_high": 0.28, "aggregation": "token-mean"}, PolicyLossConfig)
        eng = self.engine(model_path, a.lr, micro_batch_tokens=8192, ppo_epochs=a.ppo_epochs, loss=loss_cfg)
        model = eng.ds.module
        fmt = re.compile(r"-?[0-9]+")
        self.evaluate(model, 0)
        rng = random.Random(a.seed + 1)
        for step in range(1, a.steps + 1):
            batch = rng.sample(self.splits.train, a.groups)
            outs = self.sample(model, [s.prompt for s in batch], a.group_size)
            items, kept, reward_sum = [], 0, 0.0
            for g, spec in enumerate(batch):
                group = outs[g * a.group_size:(g + 1) * a.group_size]
                rewards = torch.tensor([(o[3].strip() == spec.reference) + 0.2 * bool(fmt.fullmatch(o[3]))
                                        for o in group], dtype=torch.float32)
                reward_sum += float(rewards.sum())
                if float(rewards.std()) == 0.0:
                    continue  # dynamic sampling: no signal in this group
                kept += 1
                for o, adv in zip(group, compute_advantages(rewards, AdvantageConfig()).tolist()):
                    items.append(TrainBatchItem(o[0], o[1], o[2], adv, f"{step}/{g}"))
            metrics = eng.train_step(items) if items else {}
            if step % 25 == 0:
                self.emit(phase="rl", step=step, reward_mean=round(reward_sum / len(outs), 4), kept_groups=kept,
                          entropy=round(metrics.get("entropy", float("nan")), 4))
            if step % a.eval_every == 0:
                self.evaluate(model, step)


def main(argv: list[str] | None = None) -> int:
    import torch

    args = parse_args(argv)
    torch.manual_seed(args.seed)
    recipe = Recipe(args)
    try:
        recipe.grpo(args.sft_model or recipe.sft())
    finally:
        recipe.log_file.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
