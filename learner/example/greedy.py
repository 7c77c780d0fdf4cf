"""Greedy pass@1 of a model in this process (the cold-start SFT's stopping test).

Not the evaluation of record: that runs through the rollout and verifier
pools (``rlvr.learner.watch.eval_rounds``). This is a fast, in-process check used
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


@torch.no_grad()
def greedy_from_ids(model, tokenizer, rows: list[list[int]], max_new_tokens: int) -> list[str]:
    """Greedy completions of token-id prompts (left-padded into one batch)."""
    was_training = model.training
    model.eval()
    try:
        width = max(len(r) for r in rows)
        pad = tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        gen = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=pad)
        return tokenizer.batch_decode(gen[:, width:], skip_special_tokens=True)
    finally:
        model.train(was_training)


def calculator_episode(tokenizer, prompt: str, gold: str) -> tuple[list[int], list[int], list[int]]:
    """The calculator protocol's transcript of one solved problem (examples/calculator/calc_env.py):
    the model asks ("=" then EOS), the calculator answers ("<value>="), the model copies it.
    (prompt ids, response ids, loss mask: 0 on the calculator's tokens)."""
    ask = tokenizer("=")["input_ids"] + [tokenizer.eos_token_id]
    reply = tokenizer(f"{gold}=")["input_ids"]
    answer = tokenizer(gold)["input_ids"] + [tokenizer.eos_token_id]
    return tokenizer(prompt)["input_ids"], ask + reply + answer, [1] * len(ask) + [0] * len(reply) + [1] * len(answer)


def greedy_calculator_accuracy(model, tokenizer, prompts: list[str], golds: list[str], max_new_tokens: int) -> float:
    """Greedy success on calculator episodes: a first turn of "=" gets the calculator's answer, then a second turn."""
    first = greedy_from_ids(model, tokenizer, [tokenizer(p)["input_ids"] for p in prompts], max_new_tokens)
    answers = list(first)
    asked = [i for i, a in enumerate(first) if a.strip() == "="]
    if asked:
        rows = [calculator_episode(tokenizer, prompts[i], golds[i])[0]
                + tokenizer("=")["input_ids"] + [tokenizer.eos_token_id] + tokenizer(f"{golds[i]}=")["input_ids"]
                for i in asked]
        for i, second in zip(asked, greedy_from_ids(model, tokenizer, rows, max_new_tokens), strict=True):
            answers[i] = second
    return sum(a.strip() == g for a, g in zip(answers, golds, strict=True)) / max(1, len(golds))
