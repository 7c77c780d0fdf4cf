"""Per-token KL estimators between the policy and a reference model.

Tokens are sampled from the policy π, so with x = log π_ref(a) - log π(a):

- k1 = -x                   unbiased, high variance, can be negative
- k2 = x^2 / 2              biased, low variance, non-negative
- k3 = (e^x - 1) - x        unbiased, low variance, non-negative

Source: J. Schulman, "Approximating KL Divergence" (2020),
http://joschu.net/blog/kl-approx.html; k3 is the estimator used by GRPO
(Shao et al. 2024, eq. 4).

Not covered: computing the reference log-probs (the engine) and the
coefficient β (``PolicyLossConfig.kl_coef``).
"""

from __future__ import annotations

from typing import Callable, Literal

import torch

from rlvr.learner.algos.config import KLEstimator
KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class KLEstimatorUnknownError(KeyError):
    """No KL estimator is registered under the requested name."""


def k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 = log π(a) - log π_ref(a). logprobs, ref_logprobs: [B, T] -> [B, T]."""
    return logprobs - ref_logprobs


def k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2 = (log π(a) - log π_ref(a))^2 / 2. [B, T] -> [B, T]."""
    return 0.5 * (logprobs - ref_logprobs).square()


def k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = π_ref/π - 1 - log(π_ref/π). [B, T] -> [B, T], always >= 0.

    Written as expm1(x) - x: ``exp(x) - 1 - x`` cancels catastrophically for
    small |x| and can come out slightly negative in float32.
    """
    x = ref_logprobs - logprobs  # [B, T]
    return torch.expm1(x) - x


KL_ESTIMATORS: dict[str, KLFn] = {"k1": k1, "k2": k2, "k3": k3}


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KLEstimator) -> torch.Tensor:
    """Dispatch to the estimator named ``estimator``. [B, T] -> [B, T]."""
    try:
        fn = KL_ESTIMATORS[estimator]
    except KeyError:
        raise KLEstimatorUnknownError(f"unknown KL estimator {estimator!r}; known: {sorted(KL_ESTIMATORS)}") from None
    return fn(logprobs, ref_logprobs)


__all__ = ["KLEstimator", "KLEstimatorUnknownError", "KL_ESTIMATORS", "k1", "k2", "k3", "kl_estimate"]
