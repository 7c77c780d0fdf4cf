"""Process-supervised advantages: a reward per step, credited to the tokens before it.

DeepSeekMath's process supervision for GRPO (Shao et al. 2024, "DeepSeekMath:
Pushing the Limits of Mathematical Reasoning in Open Language Models",
Sec. 4.1.3): completion i of a group has steps ending at token indices
index(1) < ... < index(K_i) with rewards r_i^index(j). The rewards are
normalised over *all* steps of the group,

    r~_i^index(j) = (r_i^index(j) - mean(R)) / std(R),   R = every step reward of the group,

and the advantage of token t of completion i is the sum of the normalised
rewards of the steps that end at or after it:

    A_i,t = sum over j with index(j) >= t of r~_i^index(j).

So a token before a wrong step carries that step's penalty, and a token after
the last step (a final answer with no step of its own) carries nothing.
``mix_outcome`` adds ``weight x`` the group's outcome advantage (one number
per completion, from ``advantages.py``) to every token, for runs that use
both.

The same function takes the per-turn rewards of a multi-turn episode: each
turn is a step ending at the turn's last policy token.

Pure: lists in, lists out, float64 inside; no torch, no model, no I/O.
The learner builds the steps (``learner/train/steps.py``) and hands the per-token
advantages to the loss.
"""

from __future__ import annotations

import math


class StepsMalformedError(ValueError):
    """Step ends out of order or past the completion, or ends and rewards of different lengths."""


def process_advantages(
    step_rewards: list[list[float]],  # [G][K_i] reward of each step of completion i
    step_ends: list[list[int]],  # [G][K_i] index of the last token of each step (0-based, ascending)
    lengths: list[int],  # [G] completion tokens of each completion
    eps: float = 1e-6,
) -> list[list[float]]:  # [G][T_i] advantage of every token
    """DeepSeekMath's process-supervised advantage for one group (see the module docstring).

    std is the sample standard deviation (Bessel-corrected) over all step
    rewards of the group, as ``grpo`` uses for outcomes; with fewer than two
    steps in the group, or all equal, every advantage is 0 (no signal).
    """
    if not (len(step_rewards) == len(step_ends) == len(lengths)):
        raise StepsMalformedError(f"{len(step_rewards)} reward lists, {len(step_ends)} end lists, {len(lengths)} lengths")
    for i, (rs, ends, n) in enumerate(zip(step_rewards, step_ends, lengths, strict=True)):
        if len(rs) != len(ends):
            raise StepsMalformedError(f"completion {i}: {len(rs)} step rewards for {len(ends)} step ends")
        if any(b <= a for a, b in zip(ends, ends[1:])) or any(e < 0 or e >= n for e in ends):
            raise StepsMalformedError(f"completion {i}: step ends {ends} not ascending within 0..{n - 1}")
    flat = [float(r) for rs in step_rewards for r in rs]
    if len(flat) < 2:
        return [[0.0] * n for n in lengths]
    mean = sum(flat) / len(flat)
    std = math.sqrt(sum((r - mean) ** 2 for r in flat) / (len(flat) - 1))
    out = []
    for rs, ends, n in zip(step_rewards, step_ends, lengths, strict=True):
        norm = [(r - mean) / (std + eps) for r in rs]  # [K_i]
        adv = [0.0] * n  # [T_i]
        # A_t = sum of norm[j] over steps j with ends[j] >= t: a suffix sum, walked backwards.
        acc, j = 0.0, len(ends) - 1
        for t in range(n - 1, -1, -1):
            while j >= 0 and ends[j] >= t:
                acc += norm[j]
                j -= 1
            adv[t] = acc
        out.append(adv)
    return out


def mix_outcome(token_adv: list[list[float]], outcome_adv: list[float], weight: float) -> list[list[float]]:
    """``token_adv[i][t] + weight * outcome_adv[i]``: process and outcome credit in one advantage."""
    if len(token_adv) != len(outcome_adv):
        raise StepsMalformedError(f"{len(token_adv)} completions of token advantages, {len(outcome_adv)} outcomes")
    return [[a + weight * o for a in adv] for adv, o in zip(token_adv, outcome_adv, strict=True)]
