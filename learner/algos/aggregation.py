"""Loss aggregation: how per-token losses [B, T] become one scalar.

The three modes differ in how much weight a long sequence gets:

- ``token-mean``: every token counts the same (DAPO's token-level loss).
- ``seq-mean-token-mean``: every sequence counts the same; tokens are
  averaged within a sequence first (the original GRPO objective).
- ``seq-mean-token-sum-norm``: token sums divided by one constant length,
  then averaged over sequences (Dr. GRPO), so there is no length bias at all.

Gradient accumulation: a micro-batch passes the *full* batch's token count
(``num_tokens``) and sequence count (``num_sequences``); summing the
micro-batch losses then gives exactly the full-batch loss. Left as ``None``
they default to the counts of the tensors passed in.

Not covered: the per-token loss itself (policy_loss.py) and cross-rank
normalisation: with several data-parallel ranks the learner passes the
global token / sequence counts divided by the world size, so DeepSpeed's
gradient average equals the single-process gradient (learner/train/rank_commands.py).
"""

from __future__ import annotations

from typing import Callable

import torch

from rlvr.learner.algos.config import AggregationMode
AggregateFn = Callable[..., torch.Tensor]


class AggregationUnknownError(KeyError):
    """No aggregation is registered under the requested mode."""


def _sequences(mask: torch.Tensor, num_sequences: float | None) -> torch.Tensor | float:
    # Rows without any loss token (e.g. an empty completion) are not sequences.
    if num_sequences is not None:
        return max(float(num_sequences), 1.0)
    return (mask.sum(dim=-1) > 0).sum().clamp_min(1).to(torch.float32)


def token_mean(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    *,
    norm_length: int,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
) -> torch.Tensor:
    """Token-level mean over the whole batch.

        L = sum_i sum_t m_it * l_it / sum_i sum_t m_it

    Source: Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning
    System at Scale", eq. 12 (token-level policy gradient loss).

    per_token, mask: [B, T] -> scalar.
    """
    m = mask.to(per_token.dtype)  # [B, T]
    denom = max(float(num_tokens), 1.0) if num_tokens is not None else m.sum().clamp_min(1)
    return (per_token * m).sum() / denom


def seq_mean_token_mean(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    *,
    norm_length: int,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
) -> torch.Tensor:
    """Mean over sequences of the per-sequence token mean.

        L = 1/B * sum_i ( sum_t m_it * l_it / sum_t m_it )

    Source: Shao et al. 2024, "DeepSeekMath", eq. 3 (the GRPO objective's
    1/G sum_i 1/|o_i| sum_t).

    per_token, mask: [B, T] -> scalar.
    """
    m = mask.to(per_token.dtype)  # [B, T]
    per_seq = (per_token * m).sum(dim=-1) / m.sum(dim=-1).clamp_min(1)  # [B]
    return per_seq.sum() / _sequences(mask, num_sequences)


def seq_mean_token_sum_norm(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    *,
    norm_length: int,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
) -> torch.Tensor:
    """Mean over sequences of the token sum divided by a constant length.

        L = 1/B * sum_i ( sum_t m_it * l_it / L_norm )

    ``L_norm`` is ``PolicyLossConfig.norm_length``: a constant, by convention
    the generation budget (the sampling ``max_tokens``), never the length of
    the padded tensor, which changes from micro-batch to micro-batch.
    Source: Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical
    Perspective" (Dr. GRPO), eq. 3 and their reference code's
    ``masked_mean(..., constant_normalizer=generate_max_length)``.

    per_token, mask: [B, T] -> scalar.
    """
    m = mask.to(per_token.dtype)  # [B, T]
    per_seq = (per_token * m).sum(dim=-1) / float(norm_length)  # [B]
    return per_seq.sum() / _sequences(mask, num_sequences)


AGGREGATIONS: dict[str, AggregateFn] = {
    "token-mean": token_mean,
    "seq-mean-token-mean": seq_mean_token_mean,
    "seq-mean-token-sum-norm": seq_mean_token_sum_norm,
}


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: AggregationMode,
    *,
    norm_length: int,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
) -> torch.Tensor:
    """Dispatch to the aggregation named ``mode``. per_token, mask: [B, T]."""
    try:
        fn = AGGREGATIONS[mode]
    except KeyError:
        raise AggregationUnknownError(f"unknown aggregation {mode!r}; known: {sorted(AGGREGATIONS)}") from None
    return fn(per_token, mask, norm_length=norm_length, num_tokens=num_tokens, num_sequences=num_sequences)


__all__ = [
    "AGGREGATIONS",
    "AggregationMode",
    "AggregationUnknownError",
    "aggregate",
    "seq_mean_token_mean",
    "seq_mean_token_sum_norm",
    "token_mean",
]
