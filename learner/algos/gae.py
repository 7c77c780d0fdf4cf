"""Generalised advantage estimation for PPO with a critic: pure functions over [B, T] tensors.

``gae_advantages_returns(token_level_rewards, values, response_mask, gamma, lam)`` has verl's
signature and numerics (``core_algos.compute_gae_advantage_return``), so the two can be held
against each other on the same tensors; the whitening verl applies inside that function is
``masked_whiten`` here, a separate step the engine takes when ``advantage.whiten`` is on.

Masked tokens (an episode's environment or tool tokens: mask 0) are not actions. GAE *bridges*
them: the recursion runs over the policy's tokens only, as if the environment's tokens were not
there. At a masked position the carried next value and advantage pass through unchanged, with no
discount and no TD error of its own, so the last policy token of a turn bootstraps from the value
of the first policy token of the next turn (γ applied once, as between two adjacent tokens). A
reward placed on a masked token is not seen; the learner puts the outcome reward on each
completion's last policy token. Masked positions still carry a value in the outputs (the bridged
one); every consumer (the losses, ``masked_whiten``, ``explained_variance``) reads them through
the mask, so they carry no advantage and no value loss.

Sources: Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage
Estimation", eq. 16 (δ_t = r_t + γ V(s_{t+1}) - V(s_t), A_t = Σ_l (γλ)^l δ_{t+l}) and returns
R_t = A_t + V(s_t) (the value target, PPO's λ-return); verl's multi-turn bridging of observation
tokens.

Not covered: where rewards and values come from (the engine), the value loss (value_loss.py).
"""

from __future__ import annotations

import torch


def gae_advantages_returns(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE advantages and returns, right to left over each row.

        δ_t   = r_t + γ V_next - V_t
        A_t   = δ_t + γ λ A_next                  (at a policy token: m_t = 1)
        V_next, A_next ← V_t, A_t  if m_t = 1, else unchanged (bridging)
        R_t   = A_t + V_t

    with V_next = A_next = 0 past the end of the row. token_level_rewards, values,
    response_mask: [B, T] -> (advantages [B, T], returns [B, T]), no gradient, in the values'
    dtype (float32 at least).
    """
    if not (token_level_rewards.shape == values.shape == response_mask.shape) or values.dim() != 2:
        raise ValueError(
            f"rewards {tuple(token_level_rewards.shape)}, values {tuple(values.shape)} and mask "
            f"{tuple(response_mask.shape)} must be the same [B, T]"
        )
    with torch.no_grad():
        dtype = torch.promote_types(values.dtype, torch.float32)
        r, v, m = token_level_rewards.to(dtype), values.to(dtype), response_mask.to(dtype)
        next_value = torch.zeros_like(v[:, 0])  # [B]
        last_gae = torch.zeros_like(v[:, 0])  # [B]
        reversed_adv = []
        for t in reversed(range(v.shape[1])):
            delta = r[:, t] + gamma * next_value - v[:, t]
            gae_t = delta + gamma * lam * last_gae
            next_value = v[:, t] * m[:, t] + (1 - m[:, t]) * next_value
            last_gae = gae_t * m[:, t] + (1 - m[:, t]) * last_gae
            reversed_adv.append(last_gae)
        advantages = torch.stack(reversed_adv[::-1], dim=1) if reversed_adv else torch.zeros_like(v)
        return advantages, advantages + v


def masked_mean_var(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and Bessel-corrected variance of ``x`` over the mask's 1s (verl's masked_var, unbiased)."""
    m = mask.to(x.dtype)
    n = m.sum()
    mean = (x * m).sum() / n.clamp_min(1)
    var = ((x - mean) ** 2 * m).sum() / (n - 1).clamp_min(1)
    return mean, var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, *, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over the mask's 1s (verl's ``masked_whiten``); masked positions
    come out transformed too, and are never read. x, mask: [B, T] -> [B, T]."""
    mean, var = masked_mean_var(x, mask)
    out = (x - mean) * torch.rsqrt(var + eps)
    return out if shift_mean else out + mean


def token_level_rewards(rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Each row's scalar reward placed on its last policy token (mask 1), 0 elsewhere.

    rewards [B], response_mask [B, T] -> [B, T]. A row with no policy token gets nothing."""
    m = response_mask.to(torch.bool)
    positions = torch.arange(m.shape[1], device=m.device).expand_as(m)
    last = torch.where(m, positions, -1).max(dim=1).values  # [B]; -1: no policy token
    out = torch.zeros(m.shape, dtype=torch.promote_types(rewards.dtype, torch.float32), device=m.device)
    rows = (last >= 0).nonzero().squeeze(-1)
    out[rows, last[rows]] = rewards[rows].to(out.dtype)
    return out


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, eps: float = 1e-5) -> float:
    """1 - Var[R - V] / (Var[R] + eps) over the mask's 1s (Bessel-corrected, as verl's metric):
    1 when the critic predicts the returns, 0 when it predicts their mean, negative when worse.
    NaN with fewer than two masked tokens."""
    m = mask.to(torch.bool)
    if int(m.sum()) < 2:
        return float("nan")
    r = returns[m].double()
    v = values[m].double()
    return float(1.0 - torch.var(r - v) / (torch.var(r) + eps))


__all__ = ["explained_variance", "gae_advantages_returns", "masked_mean_var", "masked_whiten", "token_level_rewards"]
