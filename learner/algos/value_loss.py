"""PPO's clipped value loss: a pure function over [B, T] tensors.

``value_loss(vpreds, returns, values, response_mask, cliprange_value)`` has verl's signature and
numerics (``core_algos.compute_value_loss``: 0.5 × the token mean of the larger of the clipped and
unclipped squared errors), so the two can be held against each other on the same tensors.
Masked tokens (an episode's environment tokens) carry no value loss and do not count in the mean.

Gradient accumulation as in aggregation.py: a micro-batch passes the full batch's policy-token
count as ``num_tokens``, so the micro-batch losses sum to the full-batch loss.

Source: Schulman et al. 2017, "Proximal Policy Optimization Algorithms", eq. 9 (L^VF); the clipped
form is OpenAI baselines' ``ppo2`` (vpredclipped = V_old + clip(V - V_old, -ε_v, ε_v)).

Not covered: the returns (gae.py) and how the value loss is weighed against the policy loss (the
engine: ``advantage.critic.loss_coef``).
"""

from __future__ import annotations

import torch

from rlvr.learner.algos.aggregation import aggregate


def value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float | None,
    *,
    num_tokens: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token, with V the new value (``vpreds``, with gradient), V_old the old one (``values``)
    and R the return:

        V_clip = V_old + clip(V - V_old, -ε_v, ε_v)
        l      = max((V - R)², (V_clip - R)²)        ((V - R)² when ε_v is None)
        L      = 0.5 · token-mean of l over the mask

    vpreds, returns, values, response_mask: [B, T] -> (loss scalar, clip fraction: the share of
    masked tokens where the clipped error was the larger, no gradient).
    """
    v = vpreds.float()
    r = returns.detach().float()
    unclipped = (v - r) ** 2  # [B, T]
    if cliprange_value is None:
        per_token, clipped = unclipped, torch.zeros_like(unclipped, dtype=torch.bool)
    else:
        old = values.detach().float()
        v_clip = old + torch.clamp(v - old, -cliprange_value, cliprange_value)
        clipped_err = (v_clip - r) ** 2  # [B, T]
        per_token = torch.maximum(unclipped, clipped_err)
        clipped = clipped_err > unclipped
    loss = 0.5 * aggregate(per_token, response_mask, "token-mean", norm_length=1, num_tokens=num_tokens)
    m = response_mask.to(torch.float32)
    clipfrac = (clipped.float() * m).sum() / m.sum().clamp_min(1)
    return loss, clipfrac.detach()


__all__ = ["value_loss"]
