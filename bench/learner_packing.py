"""Learner tokens/s and peak memory: packed micro-batches against padded ones.

Both variants run the real ``LearnerEngine.train_step`` (DeepSpeed ZeRO-0,
policy loss, AdamW) on the same batch of samples whose lengths spread as
rollouts do (prompts 32-160 tokens, completions log-normal around 160,
8 to 1,024), on a random-init Qwen2, with the same ``micro_batch_tokens``;
only ``learn.engine.pack_sequences`` differs. tokens/s counts real
(prompt + completion) tokens only; ``padding_fraction`` is the share of the
positions the model ran over that were padding.

Each variant and repeat runs in a fresh subprocess (interleaved: padded,
packed, packed, padded, ...); one warm-up step, then ``--steps`` timed
steps. Peak memory is the rise of the resident-set high-water mark over the
timed steps (reset just before them, as bench/learner_memory.py does), or
``torch.cuda.max_memory_allocated`` on CUDA.

    OMP_NUM_THREADS=2 .venv/bin/python bench/learner_packing.py

prints a table and appends one JSON line to bench/results/learner_packing.jsonl.

Not covered: flash-attention's variable-length kernels (a GPU with
flash-attn installed); on CPU, sdpa runs a packed row as one masked
W x W attention, so the attention scores of a row cost W^2, not the
sum of its samples' S^2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

from learner_memory import _rss_kib, append_result, run_variant_child  # the same /proc reading and results file format

RESULTS = Path(__file__).parent / "results" / "learner_packing.jsonl"
VARIANTS = ("padded", "packed")


def build_model(out: Path, args: argparse.Namespace) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.heads,
        tie_word_embeddings=True, max_position_embeddings=2048,
    )).save_pretrained(out)


def make_batch(args: argparse.Namespace):
    import torch

    from rlvr.learner.train.batching import TrainBatchItem

    gen = torch.Generator().manual_seed(1)
    items = []
    for i in range(args.samples):
        p = int(torch.randint(32, 161, (1,), generator=gen))
        c = int(min(1024, max(8, round(160 * math.exp(0.8 * float(torch.randn(1, generator=gen)))))))
        items.append(TrainBatchItem(
            prompt_ids=torch.randint(1, args.vocab, (p,), generator=gen).tolist(),
            completion_ids=torch.randint(1, args.vocab, (c,), generator=gen).tolist(),
            behaviour_logprobs=(-torch.rand(c, generator=gen) * 5).tolist(),
            advantage=1.0 if i % 2 else -1.0,
            sample_id=f"b/{i}",
        ))
    return items


def measure(variant: str, args: argparse.Namespace) -> dict:
    """A warm-up step, then ``args.steps`` timed steps, in this (fresh) process."""
    import torch

    from rlvr.learner.train.engine import LearnerEngine
    from rlvr.learner.engine_config import TrainEngineConfig

    engine = LearnerEngine(TrainEngineConfig(
        model_path=args.model, zero_stage=0, micro_batch_tokens=args.micro_batch_tokens,
        pack_sequences=variant == "packed", bf16=args.device != "cpu",
    ), seed=0)
    items = make_batch(args)
    engine.train_step(items)
    cuda = torch.device(engine.ds.device).type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss_kib("VmRSS") * 1024
        Path("/proc/self/clear_refs").write_text("5")
    steps = []
    started = time.perf_counter()
    for _ in range(args.steps):
        steps.append(engine.train_step(items))
    if cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = _rss_kib("VmHWM") * 1024
    elapsed = time.perf_counter() - started
    tokens = sum(s["tokens"] for s in steps)
    engine.close()
    return {"variant": variant, "peak_bytes": peak - base, "seconds": elapsed, "tokens": tokens,
            "padding_fraction": steps[-1]["padding_fraction"], "micro_batches": steps[-1]["micro_batches"],
            "model_tflops_per_s": statistics.median(s["model_tflops_per_s"] for s in steps)}


def run_child(variant: str, args: argparse.Namespace, model: Path) -> dict:
    return run_variant_child(__file__, variant, model, args, ("samples", "micro_batch_tokens", "vocab", "hidden", "layers", "heads", "steps", "device"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--micro-batch-tokens", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per run, after one warm-up step")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (bf16) where there is one")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.device == "cpu":
            os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
        print(json.dumps(measure(args.child, args)))
        return

    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        build_model(model, args)
        for r in range(args.repeats):
            for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                runs[variant].append(run_child(variant, args, model))

    summary = {}
    for variant, results in runs.items():
        summary[variant] = {
            "tokens_per_s": round(statistics.median(x["tokens"] / x["seconds"] for x in results), 1),
            "peak_gib": round(statistics.median(x["peak_bytes"] for x in results) / 2**30, 3),
            "padding_fraction": round(results[0]["padding_fraction"], 3),
            "micro_batches": results[0]["micro_batches"],
        }
    padded, packed = summary["padded"], summary["packed"]
    ratios = {
        "tokens_per_s_packed_over_padded": round(packed["tokens_per_s"] / padded["tokens_per_s"], 3),
        "peak_memory_packed_over_padded": round(packed["peak_gib"] / max(padded["peak_gib"], 1e-9), 3),
    }
    shape = {k: getattr(args, k) for k in ("samples", "micro_batch_tokens", "vocab", "hidden", "layers", "heads",
                                           "steps", "device", "repeats")}
    print(f"shape: {json.dumps(shape)}; torch threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    print(f"{'variant':<8} {'tokens/s':>9} {'all runs':>22} {'peak GiB':>9} {'padding':>8} {'micro-batches':>14}")
    for variant, results in runs.items():
        s = summary[variant]
        each = ", ".join(f"{x['tokens'] / x['seconds']:.0f}" for x in results)
        print(f"{variant:<8} {s['tokens_per_s']:>9.0f} {each:>22} {s['peak_gib']:>9.3f} "
              f"{s['padding_fraction']:>8.3f} {s['micro_batches']:>14.0f}")
    print(f"tokens/s, packed / padded: {ratios['tokens_per_s_packed_over_padded']:.3f}x; "
          f"peak memory, packed / padded: {ratios['peak_memory_packed_over_padded']:.3f}x")
    append_result(RESULTS, {"shape": shape, **summary, **ratios})


if __name__ == "__main__":
    main()
