"""The numeric guards of the loss, against verl's core_algos on the same tensors.

The references below restate verl's formulas (``kl_penalty`` "low_var_kl" and
the ratio of ``compute_policy_loss``) so the comparison needs no verl install:
k3 = clamp(exp(clamp(x, ±20)) - clamp(x, ±20) - 1, ±10) with x = ref - logp,
and r = exp(clamp(logp - old, ±20)). The case is an extreme off-policy one:
tokens whose log-probs moved by 25 to 100 nats, where unguarded formulas give
1e13 or inf.
"""

import math

import torch

from rlvr.learner.algos.kl import k3
from rlvr.learner.algos.policy_loss import LossInputs, PolicyLossConfig, policy_loss

# log π_ref - log π per token: ordinary, large, extreme, and beyond float32's exp.
X = torch.tensor([[0.3, -2.0, 5.0, 25.0, 30.0, -30.0, 100.0]], dtype=torch.float32)


def verl_k3(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    kl = torch.clamp(ref_logprob - logprob, min=-20, max=20)
    return torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)


def verl_ratio(logprob: torch.Tensor, old_logprob: torch.Tensor) -> torch.Tensor:
    return torch.exp(torch.clamp(logprob - old_logprob, min=-20.0, max=20.0))


def test_k3_equals_verl_on_extreme_off_policy_tokens():
    logp = torch.full_like(X, -1.0)
    ours, theirs = k3(logp, logp + X), verl_k3(logp, logp + X)
    assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    assert ours.max().item() == 10.0 and torch.isfinite(ours).all()
    # Unguarded, the same tokens give 7e10 and inf: one would own the step.
    raw = torch.expm1(X) - X
    assert raw[0, 4] > 1e12 and math.isinf(raw[0, 6].item())


def test_k3_gradient_is_finite_and_zero_beyond_the_clamp():
    logp = torch.full_like(X, -1.0).requires_grad_(True)
    k3(logp, (logp + X).detach()).sum().backward()
    assert torch.isfinite(logp.grad).all()
    assert logp.grad[0, 3:].abs().max().item() == 0.0  # clamped tokens, as in verl
    assert logp.grad[0, 0].item() != 0.0


def _extreme_inputs() -> tuple[LossInputs, torch.Tensor]:
    # π moved far above π_old on some tokens (several PPO epochs, a sharp update);
    # negative advantage, so the unclipped surrogate -A·r is the max.
    old = torch.full((1, X.shape[1]), -3.0)
    logp = (old + X).requires_grad_(True)
    inputs = LossInputs(
        logprobs=logp, old_logprobs=old, behaviour_logprobs=old, advantages=torch.tensor([-1.0]),
        mask=torch.ones_like(old, dtype=torch.bool),
    )
    return inputs, logp


def test_ppo_ratio_equals_verl_and_the_loss_stays_finite_on_extreme_tokens():
    inputs, logp = _extreme_inputs()
    cfg = PolicyLossConfig(tis_cap=None, eps_low=0.2, eps_high=0.28)
    out = policy_loss(inputs, cfg)
    r = verl_ratio(logp.detach(), inputs.old_logprobs)
    # verl: per-token max(-A r, -A clip(r)), token-mean.
    expected = torch.maximum(r, torch.clamp(r, 0.8, 1.28)).mean()
    assert torch.isfinite(out.loss) and math.isclose(out.loss.item(), expected.item(), rel_tol=1e-5)
    assert math.isclose(out.metrics["ratio_mean"], r.mean().item(), rel_tol=1e-5)
    out.loss.backward()
    assert torch.isfinite(logp.grad).all()
    # Unguarded, exp(100) overflows float32 and the loss is inf.
    assert math.isinf(torch.exp(X[0, 6]).item())


def test_kl_term_in_the_loss_is_verls_clamped_k3():
    old = torch.zeros(1, X.shape[1])
    logp = old.clone().requires_grad_(True)
    inputs = LossInputs(
        logprobs=logp, old_logprobs=old, behaviour_logprobs=old, advantages=torch.tensor([0.0]),
        mask=torch.ones_like(old, dtype=torch.bool), ref_logprobs=X.clone(),
    )
    out = policy_loss(inputs, PolicyLossConfig(kl_coef=0.5, kl_estimator="k3", tis_cap=None))
    expected = 0.5 * verl_k3(old, X).mean()
    assert math.isclose(out.loss.item(), expected.item(), rel_tol=1e-5)
    assert math.isclose(out.metrics["kl"], verl_k3(old, X).mean().item(), rel_tol=1e-5)
