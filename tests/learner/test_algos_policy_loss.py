"""PPO-clip loss, dual-clip and truncated IS against hand-computed values."""

import math

import pytest
import torch

from rlvr.learner.algos.policy_loss import LossInputs, PolicyLossConfig, policy_loss


def _inputs(ratios, advantages, *, is_ratios=None, ref_logprobs=None) -> tuple[LossInputs, torch.Tensor]:
    """One token per sequence: logprobs chosen so that π/π_old = ratio and
    π_old/π_behaviour = is_ratio (default 1)."""
    old = torch.full((len(ratios), 1), math.log(0.5), dtype=torch.float64)  # [B, 1]
    logp = (old + torch.log(torch.tensor(ratios, dtype=torch.float64)).unsqueeze(-1)).requires_grad_(True)
    is_r = torch.tensor(is_ratios or [1.0] * len(ratios), dtype=torch.float64).unsqueeze(-1)
    inputs = LossInputs(
        logprobs=logp,
        old_logprobs=old,
        behaviour_logprobs=old - torch.log(is_r),
        advantages=torch.tensor(advantages, dtype=torch.float64),
        mask=torch.ones_like(old, dtype=torch.bool),
        ref_logprobs=ref_logprobs,
    )
    return inputs, logp


def test_asymmetric_clip_with_positive_and_negative_advantage():
    cfg = PolicyLossConfig(eps_low=0.2, eps_high=0.28, tis_cap=None)
    # (r, A): (1.5, +1) clipped at 1.28 -> -1.28; (0.5, -1) clipped at 0.8 -> +0.8;
    # (0.5, +1) unclipped -> -0.5; (1.5, -1) unclipped -> +1.5; (1.25, +1) is
    # inside clip-higher's 1.28 (a symmetric 0.2 would clip it) -> -1.25.
    inputs, logp = _inputs([1.5, 0.5, 0.5, 1.5, 1.25], [1.0, -1.0, 1.0, -1.0, 1.0])
    out = policy_loss(inputs, cfg)
    assert out.loss.item() == pytest.approx((-1.28 + 0.8 - 0.5 + 1.5 - 1.25) / 5)
    assert out.metrics["clip_frac"] == pytest.approx(2 / 5)
    out.loss.backward()
    # d(-A r)/d log π = -A r; clipped tokens carry no gradient.
    expected = torch.tensor([0.0, 0.0, -0.5, 1.5, -1.25], dtype=torch.float64) / 5
    assert torch.allclose(logp.grad.squeeze(-1), expected)


def test_dual_clip_bounds_the_loss_for_negative_advantages():
    cfg = PolicyLossConfig(eps_low=0.2, eps_high=0.28, dual_clip_c=3.0, tis_cap=None)
    # A = -1, r = 5: PPO gives max(5, 1.28) = 5, dual-clip caps at c = 3 (no gradient).
    # A = +1, r = 5: dual-clip does not apply -> -1.28.
    inputs, logp = _inputs([5.0, 5.0], [-1.0, 1.0])
    out = policy_loss(inputs, cfg)
    assert out.loss.item() == pytest.approx((3.0 - 1.28) / 2)
    assert out.metrics["dual_clip_frac"] == pytest.approx(0.5)
    out.loss.backward()
    assert torch.equal(logp.grad, torch.zeros_like(logp))


def test_truncated_is_caps_a_ratio_above_c():
    cfg = PolicyLossConfig(tis_cap=2.0)
    # π = π_old (ratio 1), A = +1, so the PPO term is -1 per token; the IS weight
    # π_old/π_behaviour is 3 (capped to C = 2) and 0.5 (kept): (-2 - 0.5) / 2.
    inputs, logp = _inputs([1.0, 1.0], [1.0, 1.0], is_ratios=[3.0, 0.5])
    out = policy_loss(inputs, cfg)
    assert out.loss.item() == pytest.approx(-1.25)
    assert out.metrics["tis_capped_frac"] == pytest.approx(0.5)
    assert out.metrics["tis_mean"] == pytest.approx(1.25)
    assert out.metrics["is_ratio_max"] == pytest.approx(3.0)
    out.loss.backward()
    # The weight is a constant (stop-gradient): d/dlogπ = w * -A * r / N.
    assert torch.allclose(logp.grad.squeeze(-1), torch.tensor([-1.0, -0.25], dtype=torch.float64))


def test_without_tis_the_behaviour_policy_is_ignored():
    inputs, _ = _inputs([1.0], [1.0], is_ratios=[3.0])
    assert policy_loss(inputs, PolicyLossConfig(tis_cap=None)).loss.item() == pytest.approx(-1.0)


def test_kl_penalty_adds_beta_times_k3():
    # π = 0.5, π_ref = 0.25: k3 = 0.5 - 1 - log 0.5 = log 2 - 0.5. A = 0, so only the KL remains.
    ref = torch.full((1, 1), math.log(0.25), dtype=torch.float64)
    inputs, _ = _inputs([1.0], [0.0], ref_logprobs=ref)
    out = policy_loss(inputs, PolicyLossConfig(kl_coef=0.1, kl_estimator="k3"))
    assert out.loss.item() == pytest.approx(0.1 * (math.log(2) - 0.5))
    assert out.metrics["kl"] == pytest.approx(math.log(2) - 0.5)
    # β = 0 still reports the KL but adds nothing to the loss.
    out0 = policy_loss(inputs, PolicyLossConfig(kl_coef=0.0))
    assert out0.loss.item() == 0.0 and out0.metrics["kl"] == pytest.approx(math.log(2) - 0.5)


def test_masked_tokens_do_not_count():
    logp = torch.zeros(1, 3, dtype=torch.float64, requires_grad=True)
    inputs = LossInputs(
        logprobs=logp,
        old_logprobs=torch.tensor([[0.0, 0.0, 5.0]], dtype=torch.float64),  # the padded token's ratio is e^-5
        behaviour_logprobs=torch.tensor([[0.0, 0.0, -50.0]], dtype=torch.float64),
        advantages=torch.tensor([1.0], dtype=torch.float64),
        mask=torch.tensor([[True, True, False]]),
    )
    out = policy_loss(inputs, PolicyLossConfig())
    assert out.loss.item() == pytest.approx(-1.0)
    assert out.metrics["tokens"] == 2.0 and out.metrics["clip_frac"] == 0.0 and out.metrics["is_ratio_max"] == 1.0
