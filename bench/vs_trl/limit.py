"""The limit: what the learner step alone costs on this machine, at the same batch.

A tight loop of forward, backward and AdamW step in plain torch, on ``rows`` sequences of
``prompt_len + completion_len`` tokens (the batch one optimizer step of either framework trains:
B x G samples, the run's mean prompt and completion lengths), with a policy-gradient loss on the
completion tokens. ``best_limit`` runs it at each thread count up to the budget and keeps the fastest:
on a shared machine two torch threads can be several times slower than one (OpenMP's threads wait on
each other when another process holds a core), and the limit is the best the budget allows. Neither
framework can train faster than this; each one's trained tokens per second over it is how close it gets.
"""

from __future__ import annotations

import time
from pathlib import Path


def learner_limit(model_dir: Path, *, rows: int, prompt_len: int, completion_len: int, threads: int,
                  steps: int = 8, warmup: int = 2) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    width = prompt_len + completion_len
    ids = torch.randint(2, model.config.vocab_size, (rows, width))
    adv = torch.randn(rows, 1)
    times = []
    for i in range(warmup + steps):
        t = time.perf_counter()
        logits = model(input_ids=ids).logits[:, prompt_len - 1:-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, ids[:, prompt_len:].unsqueeze(-1)).squeeze(-1)
        loss = -(logp * adv).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= warmup:
            times.append(time.perf_counter() - t)
    times.sort()
    median = times[len(times) // 2]
    return {"rows": rows, "prompt_len": prompt_len, "completion_len": completion_len, "threads": threads,
            "step_s_median": round(median, 4), "step_s_min": round(times[0], 4),
            "tokens_trained_per_s": round(rows * completion_len / median, 1),
            "samples_per_s": round(rows / median, 1)}


def best_limit(model_dir: Path, *, threads: int, **kw) -> dict:
    """``learner_limit`` at 1..``threads`` threads; the fastest, with each count's median step time."""
    runs = [learner_limit(model_dir, threads=t, **kw) for t in range(1, threads + 1)]
    best = min(runs, key=lambda r: r["step_s_median"])
    return {**best, "step_s_median_by_threads": {r["threads"]: r["step_s_median"] for r in runs}}
