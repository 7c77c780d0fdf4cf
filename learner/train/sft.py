"""Supervised fine-tuning with the learner's own DeepSpeed engine: the ``sft`` stage,
and the last half of ``rejection_sft``.

``run_sft`` trains cross-entropy on the completion tokens of SFT pairs
(``learner/data/sft_pairs.py``) with ``LearnerEngine.sft_step`` (token mean, the
prompt masked out), ``batch`` pairs per optimizer step drawn without
replacement from a seeded shuffle of the pairs (a new shuffle every epoch), and
exports the result as a complete HF folder: the weights, plus every other file
of the model it started from (config, tokenizer). ``rlvr-actor up`` runs it in
a child process (``python -m rlvr.learner.train.sft``), so the launcher itself
never initialises torch.distributed.

A pair with token ids trains on those ids (rejection sampling's kept set: the
policy's own tokens); EOS is appended when the completion ended by stopping
and the ids do not already end with it. A pair with text only is tokenised
here: a text prompt as is, a chat prompt through the tokenizer's chat template
with the generation prompt, the completion as is, then EOS.
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

from rlvr.learner.data.sft_pairs import SFTPair, read_pairs
from rlvr.learner.engine_config import ConstantSchedule, TrainEngineConfig


class SFTParams(msgspec.Struct, frozen=True, kw_only=True):
    steps: int
    batch: int
    lr: float
    warmup_steps: int = 0
    seed: int = 0


def encode_pair(tok, pair: SFTPair) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids ending in EOS where the completion ended) of one pair."""
    eos = tok.eos_token_id
    if pair.prompt_ids is not None and pair.completion_ids is not None:
        ids = list(pair.completion_ids)
        if pair.source.get("finish_reason", "stop") == "stop" and eos is not None and ids[-1] != eos:
            ids.append(eos)
        return list(pair.prompt_ids), ids
    if isinstance(pair.prompt, str):
        prompt = tok(pair.prompt, add_special_tokens=False)["input_ids"]
    else:
        messages = [{"role": m.role, "content": m.content} for m in pair.prompt]
        prompt = list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
    return prompt, tok(pair.completion, add_special_tokens=False)["input_ids"] + ([eos] if eos is not None else [])


def run_sft(engine_cfg: TrainEngineConfig, pairs: list[SFTPair], params: SFTParams, out_dir: Path,
            log=print) -> dict:
    """Train ``params.steps`` SFT steps from ``engine_cfg.model_path`` and export to ``out_dir/model``;
    writes and returns ``out_dir/sft.json`` (steps, losses, seconds)."""
    from transformers import AutoTokenizer

    from rlvr.learner.train.engine import LearnerEngine

    if engine_cfg.lora.enabled:
        raise ValueError("an sft stage trains full parameters: learn.engine.lora must be off in stages")
    started = time.monotonic()
    model_dir = Path(engine_cfg.model_path)
    tok = AutoTokenizer.from_pretrained(model_dir)
    encoded = [encode_pair(tok, p) for p in pairs]
    cfg = msgspec.structs.replace(
        engine_cfg, optimizer=msgspec.structs.replace(engine_cfg.optimizer, lr=params.lr),
        schedule=ConstantSchedule(warmup_steps=params.warmup_steps), ppo_epochs=1,
        loss=msgspec.structs.replace(engine_cfg.loss, kl_coef=0.0),  # no reference model to build
    )
    engine = LearnerEngine(cfg, seed=params.seed)
    rng = random.Random(params.seed)
    order: list[int] = []
    losses: list[float] = []
    for step in range(1, params.steps + 1):
        batch = []
        while len(batch) < min(params.batch, len(encoded)):
            if not order:
                order = list(range(len(encoded)))
                rng.shuffle(order)
            batch.append(encoded[order.pop()])
        metrics = engine.sft_step(batch)
        losses.append(float(metrics["loss"]))
        if step == 1 or step % 25 == 0 or step == params.steps:
            log(f"[sft] step {step}/{params.steps}  loss {metrics['loss']:.4f}")
    target = Path(out_dir) / "model"
    tmp = target.with_name("model.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    engine.export_weights(tmp)
    for f in model_dir.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and not f.name.endswith(".safetensors.index.json"):
            shutil.copy(f, tmp / f.name)
    shutil.rmtree(target, ignore_errors=True)
    tmp.replace(target)  # the stage's model appears whole or not at all
    info = {"model": str(target), "steps": params.steps, "pairs": len(pairs), "loss_first": losses[0],
            "loss_last": losses[-1], "seconds": round(time.monotonic() - started, 1)}
    (Path(out_dir) / "sft.json").write_text(json.dumps(info, indent=2))
    return info


def main(argv: list[str] | None = None) -> int:
    from rlvr.actors.lifeline import follow_up

    ap = argparse.ArgumentParser(prog="python -m rlvr.learner.train.sft")
    ap.add_argument("--engine", required=True, help="the [learn.engine] section as JSON (model_path: the start)")
    ap.add_argument("--data", required=True, help="SFT pairs, JSON lines")
    ap.add_argument("--out", required=True, help="writes <out>/model and <out>/sft.json")
    ap.add_argument("--params", required=True, help="SFTParams as JSON")
    args = ap.parse_args(argv)
    follow_up()  # started in a session of its own by `up`: end with it
    engine_cfg = msgspec.json.decode(Path(args.engine).read_bytes(), type=TrainEngineConfig)
    params = msgspec.json.decode(args.params, type=SFTParams)
    info = run_sft(engine_cfg, read_pairs(args.data), params, Path(args.out), log=lambda s: print(s, flush=True))
    print(json.dumps(info), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
