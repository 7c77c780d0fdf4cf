"""Learner throughput: DeepSpeed (ZeRO-0, ZeRO-2) against a plain torch loop.

All three train the same random Qwen2 model on the same batch of scored
samples with the same packing, policy loss, AdamW and gradient clipping, in
one process, so the ratio is the cost (or gain) of going through
DeepSpeed. It prints a table of tokens/s (prompt + completion tokens
through forward and backward) and the ratio to plain torch.

    OMP_NUM_THREADS=2 .venv/bin/python bench/learner_throughput.py

Not covered: multi-process data parallelism, GPUs, ZeRO-3 (its gathers only
pay off across ranks), and generation.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def build_model(out: Path, args: argparse.Namespace) -> Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        tie_word_embeddings=True,
        max_position_embeddings=args.prompt_len + args.completion_len + 8,
    )
    Qwen2ForCausalLM(cfg).save_pretrained(out)
    return out


def make_batch(args: argparse.Namespace):
    import torch

    from rlvr.learner.train.batching import TrainBatchItem

    gen = torch.Generator().manual_seed(1)
    items = []
    for i in range(args.samples):
        # Completion lengths vary around the target, as real rollouts do.
        n = int(args.completion_len * (0.5 + torch.rand(1, generator=gen).item()))
        items.append(
            TrainBatchItem(
                prompt_ids=torch.randint(0, args.vocab, (args.prompt_len,), generator=gen).tolist(),
                completion_ids=torch.randint(0, args.vocab, (n,), generator=gen).tolist(),
                behaviour_logprobs=(-torch.rand(n, generator=gen) * 5).tolist(),
                advantage=1.0 if i % 2 else -1.0,
                sample_id=f"b/{i}",
            )
        )
    return items


class PlainTorchTrainer:
    """The engine's train_step without DeepSpeed: same packing, loss, AdamW, clipping."""

    def __init__(self, model_dir: Path, cfg) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        torch.manual_seed(0)
        self.cfg = cfg
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.optimizer.lr)

    def train_step(self, items) -> None:
        import torch

        from rlvr.learner.algos.policy_loss import LossInputs, policy_loss
        from rlvr.learner.train.batching import micro_batches

        cfg = self.cfg
        mbs = micro_batches(items, cfg.micro_batch_tokens, 0)
        num_tokens = float(sum(int(mb.loss_mask.sum()) for mb in mbs))
        for mb in mbs:
            logits = self.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False).logits
            logits = logits[:, :-1].float() / cfg.temperature
            logz = torch.logsumexp(logits, -1)
            logp = logits.gather(-1, mb.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1) - logz
            with torch.no_grad():
                entropy = logz - (torch.softmax(logits, -1) * logits).sum(-1)
            out = policy_loss(
                LossInputs(logp, logp.detach(), mb.behaviour_logprobs, mb.advantages, mb.loss_mask,
                           entropy=entropy, num_tokens=num_tokens, num_sequences=float(len(items))),
                cfg.loss,
            )
            out.loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def close(self) -> None:
        pass


def timed_rounds(trainers: dict, items, args: argparse.Namespace) -> dict[str, list[float]]:
    """One step of each trainer per round, in a rotating order, so that load
    from other processes on a shared machine hits all of them alike."""
    names = list(trainers)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.warmup + args.steps):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t0 = time.perf_counter()
            trainers[name].train_step(items)
            if r >= args.warmup:
                times[name].append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--completion-len", type=int, default=96)
    parser.add_argument("--micro-batch-tokens", type=int, default=2048)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()

    import torch

    from rlvr.learner.engine_config import TrainEngineConfig, OptimizerConfig

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(Path(tmp) / "model", args)
        items = make_batch(args)
        tokens = sum(len(it.prompt_ids) + len(it.completion_ids) for it in items)
        params = sum(p.numel() for p in __import__("transformers").AutoModelForCausalLM.from_pretrained(model_dir).parameters())
        base = dict(model_path=str(model_dir), micro_batch_tokens=args.micro_batch_tokens,
                    optimizer=OptimizerConfig(lr=1e-5), grad_clip=1.0)
        from rlvr.learner.train.engine import LearnerEngine

        trainers = {"plain torch": PlainTorchTrainer(model_dir, TrainEngineConfig(**base, zero_stage=0))}
        for stage in (0, 2):
            trainers[f"deepspeed zero-{stage}"] = LearnerEngine(TrainEngineConfig(**base, zero_stage=stage), seed=0)
        results = timed_rounds(trainers, items, args)
        for trainer in trainers.values():
            trainer.close()

    print(f"\nmodel: {params / 1e6:.2f}M params (hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}); "
          f"batch: {len(items)} samples, {tokens} tokens; torch threads: {torch.get_num_threads()}; "
          f"{args.steps} timed rounds after {args.warmup} warm-up, engines interleaved")
    ref = tokens / statistics.median(results["plain torch"])
    best = tokens / min(results["plain torch"])
    print(f"{'engine':<18} {'step ms median':>15} {'min':>8} {'tokens/s':>9} {'vs torch':>9} {'(by min)':>9}")
    for name, times in results.items():
        tps = tokens / statistics.median(times)
        print(f"{name:<18} {1000 * statistics.median(times):>15.1f} {1000 * min(times):>8.1f} {tps:>9.0f} "
              f"{tps / ref:>9.3f} {tokens / min(times) / best:>9.3f}")


if __name__ == "__main__":
    main()
