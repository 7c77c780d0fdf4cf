"""Per-token KL estimators between the policy and a reference model.

Tokens are sampled from the policy π, so with x = log π_ref(a) - log π(a):

- k1 = -x                   unbiased, high variance, can be negative
- k2 = x^2 / 2              biased, low variance, non-negative
- k3 = (e^x - 1) - x        unbiased, low variance, non-negative

Source: J. Schulman, "Approximating KL Divergence" (2020),
http://joschu.net/blog/kl-approx.html; k3 is the estimator used by GRPO
(Shao et al. 2024, eq. 4).

Guard (k3 only, as verl's ``core_algos.kl_penalty`` does): x is clamped to
±``K3_LOG_RATIO_CLAMP`` (20) before ``exp`` and the per-token k3 to at most
``K3_CLAMP`` (10). Why: k3 grows like e^x, so one token the reference finds
e^30 times likelier than the policy (an extreme off-policy token, or a
reference left far behind) gives k3 ≈ 1e13, or inf in float32 past x ≈ 88,
and one such token decides the whole step's gradient or writes NaN into the
weights. The clamp bounds each token's penalty; beyond it the token's KL
gradient is zero, exactly as in verl, so the two agree on the same tensors.

Not covered: computing the reference log-probs (the engine) and the
coefficient β (``PolicyLossConfig.kl_coef``).
"""

from __future__ import annotations

from typing import Callable

import torch

from rlvr.learner.algos.config import KLEstimator
KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# verl's bounds (core_algos.kl_penalty, "low_var_kl"): see the module docstring.
K3_LOG_RATIO_CLAMP = 20.0
K3_CLAMP = 10.0


class KLEstimatorUnknownError(KeyError):
    """No KL estimator is registered under the requested name."""


def k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 = log π(a) - log π_ref(a). logprobs, ref_logprobs: [B, T] -> [B, T]."""
    return logprobs - ref_logprobs


def k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2 = (log π(a) - log π_ref(a))^2 / 2. [B, T] -> [B, T]."""
    return 0.5 * (logprobs - ref_logprobs).square()


def k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = π_ref/π - 1 - log(π_ref/π). [B, T] -> [B, T], in [0, K3_CLAMP].

    Written as expm1(x) - x: ``exp(x) - 1 - x`` cancels catastrophically for
    small |x| and can come out slightly negative in float32. x is clamped to
    ±20 and the result to 10 (verl's guards; module docstring).
    """
    x = torch.clamp(ref_logprobs - logprobs, -K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)  # [B, T]
    return torch.clamp(torch.expm1(x) - x, -K3_CLAMP, K3_CLAMP)


KL_ESTIMATORS: dict[str, KLFn] = {"k1": k1, "k2": k2, "k3": k3}


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KLEstimator) -> torch.Tensor:
    """Dispatch to the estimator named ``estimator``. [B, T] -> [B, T]."""
    try:
        fn = KL_ESTIMATORS[estimator]
    except KeyError:
        raise KLEstimatorUnknownError(f"unknown KL estimator {estimator!r}; known: {sorted(KL_ESTIMATORS)}") from None
    return fn(logprobs, ref_logprobs)


__all__ = ["K3_CLAMP", "K3_LOG_RATIO_CLAMP", "KLEstimator", "KLEstimatorUnknownError", "KL_ESTIMATORS", "k1", "k2", "k3", "kl_estimate"]
