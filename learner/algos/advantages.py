"""Group-relative advantage estimators: a registry of pure functions.

Each estimator turns the rewards of one group of G completions of the same
prompt (or a batch of such groups) into one advantage per completion. The
learner's group assembly calls :func:`compute_advantages`; adding an
estimator is a new function plus one registry line, never another ``elif``.

Not covered here: filtering zero-variance groups (the learner's dynamic
sampling filter does that before advantages are computed) and reward
shaping (the verifiers).
"""

from __future__ import annotations

from typing import Callable

import torch
from rlvr.learner.algos.config import AdvantageConfig, AdvantageName

AdvantageFn = Callable[[torch.Tensor, float], torch.Tensor]


class AdvantageUnknownError(KeyError):
    """No estimator is registered under the requested name."""


def _as_groups(rewards: torch.Tensor) -> torch.Tensor:
    # [G] -> [1, G]; [B, G] stays. Float64 so hand-computed values match exactly.
    if rewards.dim() not in (1, 2):
        raise ValueError(f"rewards must be [G] or [B, G], got shape {tuple(rewards.shape)}")
    return rewards.to(torch.float64).reshape(-1, rewards.shape[-1])


def grpo(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantage, standardised within the group.

        A_i = (r_i - mean(r)) / (std(r) + eps)

    std is the sample standard deviation (Bessel-corrected, as in the
    reference implementations); a group of one has std 0, so A = 0.
    Source: Shao et al. 2024, "DeepSeekMath: Pushing the Limits of
    Mathematical Reasoning in Open Language Models", eq. for outcome
    supervision (Sec. 4.1.2).

    rewards: [G] or [B, G] -> advantages of the same shape.
    """
    r = _as_groups(rewards)  # [B, G]
    mean = r.mean(dim=-1, keepdim=True)  # [B, 1]
    if r.shape[-1] > 1:
        std = r.std(dim=-1, keepdim=True, correction=1)  # [B, 1]
    else:
        std = torch.zeros_like(mean)
    adv = (r - mean) / (std + eps)  # [B, G]
    return adv.reshape(rewards.shape).to(rewards.dtype)


def drgrpo(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Dr. GRPO advantage: mean-centred, no division by the group std.

        A_i = r_i - mean(r)

    Dropping the std removes GRPO's question-level difficulty bias.
    Source: Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical
    Perspective", Sec. 3.2. ``eps`` is unused (same signature as the others).

    rewards: [G] or [B, G] -> advantages of the same shape.
    """
    r = _as_groups(rewards)  # [B, G]
    adv = r - r.mean(dim=-1, keepdim=True)  # [B, G]
    return adv.reshape(rewards.shape).to(rewards.dtype)


def rloo(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """REINFORCE leave-one-out baseline.

        A_i = r_i - 1/(G-1) * sum_{j != i} r_j  =  G/(G-1) * (r_i - mean(r))

    A group of one has no baseline to leave out: A = 0.
    Source: Kool et al. 2019, "Buy 4 REINFORCE Samples, Get a Baseline for
    Free!"; Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style
    Optimization for Learning from Human Feedback in LLMs", eq. 7.
    ``eps`` is unused.

    rewards: [G] or [B, G] -> advantages of the same shape.
    """
    r = _as_groups(rewards)  # [B, G]
    g = r.shape[-1]
    if g == 1:
        return torch.zeros_like(rewards)
    baseline = (r.sum(dim=-1, keepdim=True) - r) / (g - 1)  # [B, G]
    return (r - baseline).reshape(rewards.shape).to(rewards.dtype)


ADVANTAGES: dict[str, AdvantageFn] = {"grpo": grpo, "drgrpo": drgrpo, "rloo": rloo}


def compute_advantages(rewards: torch.Tensor, cfg: AdvantageConfig) -> torch.Tensor:
    """Dispatch to the estimator named in ``cfg``. rewards: [G] or [B, G]."""
    if cfg.name == "gae":
        raise AdvantageUnknownError(
            '"gae" is not a group estimator: the engine computes it per token with the critic (learner/algos/gae.py)')
    try:
        fn = ADVANTAGES[cfg.name]
    except KeyError:
        raise AdvantageUnknownError(f"unknown advantage estimator {cfg.name!r}; known: {sorted(ADVANTAGES)}") from None
    return fn(rewards, cfg.eps)


__all__ = [
    "ADVANTAGES",
    "AdvantageConfig",
    "AdvantageName",
    "AdvantageUnknownError",
    "compute_advantages",
    "drgrpo",
    "grpo",
    "rloo",
]
