"""Preparation before a run: the built-in example's model and its cold start.

``rlvr-actor up`` runs this in a child process (so the launcher itself never
initialises torch.distributed) when the config has ``[learn.prepare]``:

1. build a character tokenizer and a random-init tiny Qwen2 (``arith_model``);
2. cold-start SFT on generated worked solutions (prompt "37+45=", response
   "82<eos>") with the learner's own DeepSpeed engine (``sft_step``), AdamW
   at ``sft_lr`` with warm-up, loss on the answer tokens only;
3. stop on a target, not a step count: greedy pass@1 on held-out prompts is
   checked every ``sft_check_every`` steps and the warm-up ends once it
   reaches ``sft_target_pass_at_1`` (docs/design.md: the jump from ~10% to ~60%
   happens at a seed-dependent step, so a fixed count over- or undershoots);
4. export the warmed-up weights as an HF folder: version 0 of the policy,
   which the rollout replicas load and the RL learner starts from.

It writes ``<run_dir>/prepared.json`` with the model path and the warm-up's
numbers, which the launcher puts into every role's config.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

import msgspec

from rlvr.actors.config import convert_config, read_config
from rlvr.actors.lifeline import follow_up
from rlvr.learner.config import LearnConfig


class PrepareView(msgspec.Struct, frozen=True):
    """What the preparation step reads of the whole-run config: the seed and
    the learner's section (the other sections are the entry layer's, and left alone)."""

    seed: int = 0
    learn: LearnConfig = LearnConfig()


def load_prepare_view(path: str | Path) -> PrepareView:
    raw, source = read_config(path)
    return convert_config(raw, PrepareView, source)


def prepare_tiny_arithmetic(cfg: PrepareView, run_dir: Path, log=print) -> dict:
    from transformers import AutoTokenizer

    from rlvr.learner.example.arith_model import build_arith_model
    from rlvr.learner.data.datasets import load_splits
    from rlvr.learner.train.engine import LearnerEngine
    from rlvr.learner.engine_config import ConstantSchedule, TrainEngineConfig, OptimizerConfig
    from rlvr.learner.example.greedy import calculator_episode, greedy_accuracy, greedy_calculator_accuracy

    p = cfg.learn.prepare
    assert p is not None
    started = time.monotonic()
    tools = p.tool_share > 0
    init_dir = build_arith_model(
        run_dir / "model-init", hidden=p.hidden, layers=p.layers, heads=p.heads, seed=cfg.seed,
        tie_embeddings=p.tie_embeddings, chat=tools,
    )
    tok = AutoTokenizer.from_pretrained(init_dir)
    dataset = cfg.learn.dataset
    if p.sft_ops:  # the warm-up's own problems (the calculator example warms up on +/-, learns on products)
        dataset = msgspec.structs.replace(dataset, ops=p.sft_ops, env=None)
    splits = load_splits(dataset, seed=cfg.seed)
    for checked in (splits, load_splits(cfg.learn.dataset, seed=cfg.seed) if p.sft_ops else None):
        if checked is not None:  # the character tokenizer refuses letters: say so now, not mid-run
            check_tasks_encodable([*checked.train, *checked.heldout])
    golds = lambda specs: [s.reference for s in specs]  # noqa: E731
    check = splits.heldout[: p.sft_check_prompts]
    engine = LearnerEngine(
        TrainEngineConfig(
            model_path=str(init_dir), zero_stage=0,
            optimizer=OptimizerConfig(lr=p.sft_lr, betas=(0.9, 0.99)),
            schedule=ConstantSchedule(warmup_steps=p.sft_warmup_steps), grad_clip=1.0,
            micro_batch_tokens=1 << 16, pad_token_id=tok.pad_token_id,
        ),
        seed=cfg.seed,
    )
    rng = random.Random(cfg.seed)
    max_new = cfg.learn.sampling.max_tokens
    acc, step = 0.0, 0
    check_accuracy = greedy_calculator_accuracy if tools else greedy_accuracy
    for step in range(1, p.sft_max_steps + 1):
        batch = rng.sample(splits.train, p.sft_batch)
        pairs = [calculator_episode(tok, s.prompt, g) if tools and rng.random() < p.tool_share
                 else (tok(s.prompt)["input_ids"], tok(g)["input_ids"] + [tok.eos_token_id])
                 for s, g in zip(batch, golds(batch))]
        metrics = engine.sft_step(pairs)
        if step % p.sft_check_every == 0:
            acc = check_accuracy(engine.ds.module, tok, [s.prompt for s in check], golds(check), max_new)
            log(f"[sft] step {step}  loss {metrics['loss']:.3f}  greedy held-out pass@1 {acc:.3f}")
            if acc >= p.sft_target_pass_at_1:
                break
    model_dir = run_dir / "model"
    engine.export_weights(model_dir)
    for f in init_dir.iterdir():
        if not f.name.endswith(".safetensors"):
            shutil.copy(f, model_dir / f.name)
    info = {
        "model": str(model_dir), "sft_steps": step, "sft_greedy_pass_at_1": acc,
        "sft_seconds": round(time.monotonic() - started, 1), "reached_target": acc >= p.sft_target_pass_at_1,
    }
    (run_dir / "prepared.json").write_text(json.dumps(info, indent=2))
    return info


def check_tasks_encodable(specs: list) -> None:
    """Every prompt and reference is text the character tokenizer encodes (``CharsNotEncodableError`` naming
    the task and the characters, e.g. for ``prompt_style = "chat"``, whose question has letters)."""
    from rlvr.learner.example.arith_model import check_encodable

    for s in specs:
        texts = [s.prompt] if isinstance(s.prompt, str) else [m.content for m in s.prompt]
        for text in (*texts, s.reference):
            check_encodable(text, f"{s.dataset} task {s.index}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rlvr.learner.example.prepare")
    ap.add_argument("--config", required=True)
    ap.add_argument("--run-dir", required=True)
    args = ap.parse_args(argv)
    follow_up()  # `up` started us in a session of our own: end with it, even if it is SIGKILLed
    cfg = load_prepare_view(args.config)
    info = prepare_tiny_arithmetic(cfg, Path(args.run_dir), log=lambda s: print(s, flush=True))
    print(json.dumps(info), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
