"""Greedy pass@1 of a model in this process (the cold-start SFT's stopping test).

Not the evaluation of record: that runs through the rollout and verifier
pools (``rlvr.learner.eval_rounds``). This is a fast, in-process check used
only to decide when the warm-up has reached its target.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def greedy_completions(model, tokenizer, prompts: list[str], max_new_tokens: int, batch: int = 256) -> list[str]:
    was_training = model.training
    model.eval()
    out: list[str] = []
    try:
        for i in range(0, len(prompts), batch):
            enc = tokenizer(prompts[i : i + batch], return_tensors="pt", padding=True)
            gen = model.generate(
                **enc, do_sample=False, max_new_tokens=max_new_tokens,
                eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
            )
            out += tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    finally:
        model.train(was_training)
    return out


def greedy_accuracy(model, tokenizer, prompts: list[str], golds: list[str], max_new_tokens: int) -> float:
    answers = greedy_completions(model, tokenizer, prompts, max_new_tokens)
    return sum(a.strip() == g for a, g in zip(answers, golds, strict=True)) / max(1, len(golds))
