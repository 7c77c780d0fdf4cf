"""hf engine generation: peak memory and tokens/s of the log-prob read, old against new.

``before`` is the path the hf engine used until the streaming read, written
out here (``old_path``): ``generate`` with the temperature/top-k/top-p warpers
in its config and ``output_scores=True``, every step's [B, V] float32 scores
kept, then one [B, T, V] stack, ``log_softmax`` and a gather. ``after`` is the
engine itself (``HFEngine._generate_chunk``: a logits processor that keeps one
step's row, rollout/engines/hf_logprobs.py). Both run the same seeded
generation on a random-init model with a large vocabulary (built with the
test models' builder), so the tokens are the same and the log-probs are
compared (max abs difference printed).

Each variant and repeat runs in a fresh subprocess (interleaved: before,
after, after, before, ...); one short warm-up generation, then the timed
one. Peak memory is the rise of the resident-set high-water mark over the
timed generation (reset just before it, as bench/learner_memory.py does).
tokens/s counts B x generated steps.

    OMP_NUM_THREADS=1 .venv/bin/python bench/hf_scores_memory.py

prints a table and appends one JSON line to bench/results/hf_scores_memory.jsonl.

Not covered: a GPU (``--device cuda`` runs, but peak memory is still read
from the host RSS, not ``torch.cuda.max_memory_allocated``), bf16 weights.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from learner_memory import _rss_kib, append_result, run_variant_child  # the same /proc reading and results file format

RESULTS = Path(__file__).parent / "results" / "hf_scores_memory.jsonl"
VARIANTS = ("before", "after")
PROMPT = "Solve: 12+7="


def old_path(engine, rows: list[list[int]], sampling):
    """The replaced read: warpers in the config, ``output_scores``, one stack."""
    import torch
    from transformers import GenerationConfig

    greedy = sampling.temperature == 0.0
    pad = engine._model.generation_config.pad_token_id
    cfg = GenerationConfig(
        do_sample=not greedy,
        temperature=None if greedy else sampling.temperature,
        top_p=None if greedy or sampling.top_p >= 1.0 else sampling.top_p,
        top_k=0 if greedy or sampling.top_k <= 0 else sampling.top_k,
        max_new_tokens=sampling.max_tokens,
        eos_token_id=engine._eos,
        pad_token_id=pad,
        output_scores=True,
        return_dict_in_generate=True,
    )
    width = max(len(r) for r in rows)
    x = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=engine.cfg.device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=engine.cfg.device)
    with torch.inference_mode():
        res = engine._model.generate(input_ids=x, attention_mask=mask, generation_config=cfg)
    new = res.sequences[:, width:]
    scores = torch.stack(res.scores, dim=1).float()  # [B, T, V]
    lp = torch.log_softmax(scores, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    return new.tolist(), lp.tolist()


def measure(variant: str, args: argparse.Namespace) -> dict:
    """One timed generation of ``variant`` in this (fresh) process."""
    import torch

    from rlvr.protocol import SamplingParams
    from rlvr.rollout.engines.base import HFEngineConfig
    from rlvr.rollout.engines.hf import HFEngine

    engine = HFEngine(HFEngineConfig(model=args.model, device=args.device, max_batch=args.batch))
    engine._start()
    rows = [engine._tok(PROMPT)["input_ids"]] * args.batch

    def run(max_tokens: int):
        sampling = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                                  max_tokens=max_tokens)
        torch.manual_seed(0)
        if variant == "before":
            return old_path(engine, rows, sampling)
        gens = engine._generate_chunk(rows, sampling)
        return [g.ids for g in gens], [g.logprobs for g in gens]

    run(4)  # warm-up
    base = _rss_kib("VmRSS") * 1024
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set
    t0 = time.perf_counter()
    ids, lps = run(args.max_tokens)
    seconds = time.perf_counter() - t0
    peak = _rss_kib("VmHWM") * 1024
    return {"seconds": seconds, "tokens": sum(len(r) for r in ids), "peak_bytes": peak - base,
            "ids": ids, "logprobs": lps}


def run_child(variant: str, args: argparse.Namespace, model: Path) -> dict:
    return run_variant_child(__file__, variant, model, args, ("batch", "max_tokens", "temperature", "top_k", "top_p", "device"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=-1)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--results", type=Path, default=RESULTS, help="JSONL file the record is appended to")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.device == "cpu":
            os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
        print(json.dumps(measure(args.child, args)))
        return

    from rlvr.learner.example.tiny_model import build_tiny_model

    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_model(Path(tmp) / "model", vocab_size=args.vocab, seed=0)
        for r in range(args.repeats):
            for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                runs[variant].append(run_child(variant, args, model))

    before, after = runs["before"][0], runs["after"][0]
    same = all(a[: len(b)] == b for a, b in zip(before["ids"], after["ids"], strict=True))
    diff = max(abs(x - y) for a, b in zip(before["logprobs"], after["logprobs"], strict=True)
               for x, y in zip(a, b, strict=False))
    summary = {
        v: {"tokens_per_s": round(statistics.median(x["tokens"] / x["seconds"] for x in rs), 1),
            "peak_mib": round(statistics.median(x["peak_bytes"] for x in rs) / 2**20, 1),
            "tokens": rs[0]["tokens"]}
        for v, rs in runs.items()
    }
    b, a = summary["before"], summary["after"]
    ratios = {
        "peak_memory_after_over_before": round(a["peak_mib"] / max(b["peak_mib"], 1e-9), 3),
        "tokens_per_s_after_over_before": round(a["tokens_per_s"] / b["tokens_per_s"], 3),
        "same_tokens": same,
        "max_abs_logprob_diff": diff,
    }
    shape = {k: getattr(args, k) for k in ("vocab", "batch", "max_tokens", "temperature", "top_k", "top_p",
                                           "device", "repeats")}
    print(f"shape: {json.dumps(shape)}; torch threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    print(f"{'variant':<7} {'tokens/s':>9} {'all runs':>18} {'peak MiB':>9} {'all runs':>18}")
    for v, rs in runs.items():
        each_t = ", ".join(f"{x['tokens'] / x['seconds']:.0f}" for x in rs)
        each_m = ", ".join(f"{x['peak_bytes'] / 2**20:.0f}" for x in rs)
        print(f"{v:<7} {summary[v]['tokens_per_s']:>9.0f} {each_t:>18} {summary[v]['peak_mib']:>9.1f} {each_m:>18}")
    print(f"peak memory after / before: {ratios['peak_memory_after_over_before']:.3f}x; tokens/s after / before: "
          f"{ratios['tokens_per_s_after_over_before']:.3f}x; same tokens: {same}; max |logprob diff|: {diff:.1e}")
    append_result(args.results, {"shape": shape, **summary, **ratios})


if __name__ == "__main__":
    main()
