"""Learner peak memory and tokens/s of the log-prob path: full-vocabulary
logits (the old path) against log-probs chunked over tokens
(learner/train/token_logprobs.py), and what PPO's critic adds to the chunked
path (``ppo``: the value head on the same hidden states, the pass without
gradient for the old log-probs and values, GAE and the clipped value loss).

One measurement is one forward + backward of what ``train_step`` does per
micro-batch: the model's forward, log-probs and entropy at temperature T,
a policy-gradient-shaped loss on the response tokens, and its backward.
The model is a random-init Qwen2 with Qwen2.5's 151,936-token vocabulary
(tied head) and a small body; the defaults are the issue's shape (a
16k-token micro-batch, 151k vocabulary, bf16, gradient checkpointing)
scaled down in tokens and width to fit a CPU in a few GB.

Each variant and repeat runs in a fresh subprocess, so no allocator state
carries over. Peak memory is the rise above the process's memory after the
model and inputs are built:
- CPU: the kernel's resident-set high-water mark (VmHWM, reset through
  /proc/self/clear_refs just before the pass) minus the resident set then;
- CUDA: ``torch.cuda.max_memory_allocated()`` minus ``memory_allocated()``.
Parameter gradients are allocated during the pass, so both variants count
them alike. Variants run interleaved (old, new, old, new, ...) so load from
other processes hits both; the figures are medians over repeats.

    OMP_NUM_THREADS=2 .venv/bin/python bench/learner_memory.py

prints a table and the ratios, and appends one JSON line to
bench/results/learner_memory.jsonl.

Not covered: DeepSpeed and the optimizer step (bench/learner_throughput.py),
packing, and the reference model's forward (no backward, same chunking).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "learner_memory.jsonl"
VARIANTS = ("full_logits", "chunked", "ppo")


def build_model(out: Path, args: argparse.Namespace) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64, num_key_value_heads=1,
        tie_word_embeddings=True, max_position_embeddings=args.seq_len,
    )
    Qwen2ForCausalLM(cfg).save_pretrained(out)


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure(variant: str, args: argparse.Namespace) -> dict:
    """One forward + backward of ``variant`` in this (fresh) process."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.learner.algos.gae import gae_advantages_returns, token_level_rewards
    from rlvr.learner.algos.value_loss import value_loss
    from rlvr.learner.train.batching import MicroBatch
    from rlvr.learner.train.token_logprobs import full_logits_logprobs, micro_batch_logprobs_values, token_logprobs

    device = torch.device(args.device)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(device).train()
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    gen = torch.Generator().manual_seed(1)
    rows = args.tokens // args.seq_len
    ids = torch.randint(0, args.vocab, (rows, args.seq_len), generator=gen).to(device)
    mask = torch.ones_like(ids)
    loss_mask = torch.zeros(rows, args.seq_len - 1, device=device)
    loss_mask[:, args.seq_len // 4 :] = 1.0  # the response: the last three quarters of each row
    advantages = torch.linspace(-1.0, 1.0, rows, device=device).unsqueeze(-1)
    head = None
    if variant == "ppo":  # learner/train/critic.py's value head, in the model's dtype
        head = torch.nn.Linear(args.hidden, 1, dtype=dtype).to(device)
        model.add_module("rlvr_value_head", head)
        mb = MicroBatch(input_ids=ids.cpu(), attention_mask=mask.cpu(), loss_mask=loss_mask.bool().cpu(),
                        behaviour_logprobs=torch.zeros(rows, args.seq_len - 1), advantages=torch.zeros(rows),
                        sample_ids=tuple(str(i) for i in range(rows)))

    def ppo_step() -> None:
        # The engine's PPO step on one micro-batch: old log-probs and values without gradient,
        # GAE, then the pass with gradient for the policy and value losses.
        with torch.no_grad():
            _, _, old_v = micro_batch_logprobs_values(model, mb, args.temperature, device, head,
                                                      chunk_tokens=args.chunk_tokens)
        rewards = token_level_rewards(torch.linspace(0.0, 1.0, rows, device=device), loss_mask)
        adv, ret = gae_advantages_returns(rewards, old_v, loss_mask, 1.0, 0.95)
        logp, entropy, v = micro_batch_logprobs_values(model, mb, args.temperature, device, head, with_entropy=True,
                                                       chunk_tokens=args.chunk_tokens)
        vloss, _ = value_loss(v, ret, old_v, loss_mask, 0.2)
        loss = -(logp * adv * loss_mask).sum() / loss_mask.sum() - 1e-3 * (entropy * loss_mask).mean() + 0.5 * vloss
        loss.backward()
        model.zero_grad(set_to_none=True)

    def step() -> None:
        if variant == "ppo":
            return ppo_step()
        if variant == "chunked":
            logp, entropy = token_logprobs(model, ids, mask, args.temperature, with_entropy=True,
                                           chunk_tokens=args.chunk_tokens)
        else:
            logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
            logp, entropy = full_logits_logprobs(logits, ids, args.temperature, with_entropy=True)
        loss = -(logp * advantages * loss_mask).sum() / loss_mask.sum() - 1e-3 * (entropy * loss_mask).mean()
        loss.backward()
        model.zero_grad(set_to_none=True)

    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss_kib("VmRSS") * 1024
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set
    started = time.perf_counter()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = _rss_kib("VmHWM") * 1024
    elapsed = time.perf_counter() - started
    return {"variant": variant, "peak_bytes": peak - base, "seconds": elapsed, "tokens": rows * args.seq_len}


def run_child(variant: str, args: argparse.Namespace, model: Path) -> dict:
    keys = ("tokens", "seq_len", "vocab", "hidden", "layers", "chunk_tokens", "temperature", "dtype", "device")
    extra = () if args.gradient_checkpointing else ("--no-gradient-checkpointing",)
    return run_variant_child(__file__, variant, model, args, keys, extra)


def run_variant_child(script: str, variant: str, model: Path, args: argparse.Namespace,
                      keys: tuple[str, ...], extra: tuple[str, ...] = ()) -> dict:
    """Run ``script --child variant`` in a fresh process (a clean peak-memory reading) with
    ``args``' values for ``keys``; its last stdout line is its JSON result. The other
    memory benches run their children through this too."""
    argv = [sys.executable, script, "--child", variant, "--model", str(model), *extra]
    for key in keys:
        argv += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{variant} child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2048, help="micro-batch tokens (the issue's: 16384)")
    parser.add_argument("--seq-len", type=int, default=512, help="row length; rows = tokens / seq-len")
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--hidden", type=int, default=128, help="a multiple of 64 (the issue's: 896)")
    parser.add_argument("--layers", type=int, default=2, help="the issue's: 24")
    parser.add_argument("--chunk-tokens", type=int, default=1024)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-gradient-checkpointing", dest="gradient_checkpointing", action="store_false")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args)))
        return
    if args.tokens % args.seq_len or args.hidden % 64:
        parser.error("--tokens must be a multiple of --seq-len and --hidden a multiple of 64")

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
            "peak_gib": round(statistics.median(x["peak_bytes"] for x in results) / 2**30, 3),
            "tokens_per_s": round(statistics.median(x["tokens"] / x["seconds"] for x in results), 1),
        }
    old, new, ppo = summary["full_logits"], summary["chunked"], summary["ppo"]
    ratios = {
        "peak_memory_old_over_new": round(old["peak_gib"] / max(new["peak_gib"], 1e-9), 2),
        "tokens_per_s_new_over_old": round(new["tokens_per_s"] / old["tokens_per_s"], 3),
        # What the critic adds to a (chunked) micro-batch's pass: peak memory and time.
        "peak_memory_ppo_over_chunked": round(ppo["peak_gib"] / max(new["peak_gib"], 1e-9), 3),
        "tokens_per_s_ppo_over_chunked": round(ppo["tokens_per_s"] / new["tokens_per_s"], 3),
    }
    shape = {k: getattr(args, k) for k in ("tokens", "seq_len", "vocab", "hidden", "layers", "chunk_tokens",
                                           "temperature", "dtype", "device", "gradient_checkpointing", "repeats")}
    print(f"shape: {json.dumps(shape)}; logits of one copy in fp32: "
          f"{args.tokens * args.vocab * 4 / 2**30:.2f} GiB; torch threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    print(f"{'variant':<12} {'peak GiB (median)':>18} {'all runs':>24} {'tokens/s':>9}")
    for variant, results in runs.items():
        peaks = ", ".join(f"{x['peak_bytes'] / 2**30:.2f}" for x in results)
        print(f"{variant:<12} {summary[variant]['peak_gib']:>18.3f} {peaks:>24} {summary[variant]['tokens_per_s']:>9.0f}")
    print(f"peak memory, old / new: {ratios['peak_memory_old_over_new']:.2f}x; "
          f"tokens/s, new / old: {ratios['tokens_per_s_new_over_old']:.3f}x")
    print(f"PPO's critic on the chunked path: peak memory x{ratios['peak_memory_ppo_over_chunked']:.3f}, "
          f"tokens/s x{ratios['tokens_per_s_ppo_over_chunked']:.3f}")
    append_result(RESULTS, {"shape": shape, **summary, **ratios})


def append_result(path: Path, record: dict) -> None:
    """Append ``record`` to the JSON-lines file ``path``, stamped with the time, machine and commit
    (the other memory and throughput benches write their results through this too)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent, check=False).stdout.strip()
    stamped = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.machine(),
               "commit": commit, **record}
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(stamped) + "\n")


if __name__ == "__main__":
    main()
