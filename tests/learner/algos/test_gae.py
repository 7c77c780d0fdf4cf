"""GAE against the formulas written out (plain-Python loops over t), hand-computed cases, and
verl's ``compute_gae_advantage_return`` restated below (so the comparison needs no verl install):
the same signature, tensors in, tensors out, so a peer's implementation can be dropped in."""

import math
import random

import pytest
import torch

from rlvr.learner.algos.gae import (
    explained_variance,
    gae_advantages_returns,
    masked_mean_var,
    masked_whiten,
    token_level_rewards,
)


def verl_gae(token_level_rewards, values, response_mask, gamma, lam):
    """verl.trainer.ppo.core_algos.compute_gae_advantage_return, without its final whitening."""
    nextvalues, lastgaelam, out = 0, 0, []
    for t in reversed(range(token_level_rewards.shape[-1])):
        delta = token_level_rewards[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam_ = delta + gamma * lam * lastgaelam
        nextvalues = values[:, t] * response_mask[:, t] + (1 - response_mask[:, t]) * nextvalues
        lastgaelam = lastgaelam_ * response_mask[:, t] + (1 - response_mask[:, t]) * lastgaelam
        out.append(lastgaelam)
    adv = torch.stack(out[::-1], dim=1)
    return adv, adv + values


def loop_gae(rewards: list[float], values: list[float], mask: list[int], gamma: float, lam: float):
    """The recursion written out over one row, policy tokens only (masked ones bridged)."""
    policy = [t for t in range(len(mask)) if mask[t]]
    adv = [0.0] * len(mask)
    nxt_v, nxt_a = 0.0, 0.0
    for t in reversed(policy):
        delta = rewards[t] + gamma * nxt_v - values[t]
        adv[t] = delta + gamma * lam * nxt_a
        nxt_v, nxt_a = values[t], adv[t]
    return adv, [a + v for a, v in zip(adv, values)]


def test_hand_computed_three_tokens():
    # r = (0, 0, 1), V = (0.5, 0.6, 0.8), γ = 0.9, λ = 0.8:
    # δ2 = 1 - 0.8 = 0.2;           A2 = 0.2
    # δ1 = 0.9·0.8 - 0.6 = 0.12;    A1 = 0.12 + 0.72·0.2 = 0.264
    # δ0 = 0.9·0.6 - 0.5 = 0.04;    A0 = 0.04 + 0.72·0.264 = 0.23008
    r = torch.tensor([[0.0, 0.0, 1.0]])
    v = torch.tensor([[0.5, 0.6, 0.8]])
    adv, ret = gae_advantages_returns(r, v, torch.ones_like(r), 0.9, 0.8)
    assert torch.allclose(adv, torch.tensor([[0.23008, 0.264, 0.2]]), atol=1e-6)
    assert torch.allclose(ret, torch.tensor([[0.73008, 0.864, 1.0]]), atol=1e-6)


def test_gamma_lambda_one_gives_the_monte_carlo_return_minus_the_value():
    # γ = λ = 1: A_t = Σ r - V_t, and R_t = the sum of the rewards from t on.
    r = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    v = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    adv, ret = gae_advantages_returns(r, v, torch.ones_like(r), 1.0, 1.0)
    assert torch.allclose(ret, torch.ones_like(r))
    assert torch.allclose(adv, 1.0 - v)


def test_lambda_zero_gives_the_one_step_td_error():
    r = torch.tensor([[0.0, 2.0, 1.0]])
    v = torch.tensor([[0.5, 1.0, 0.25]])
    adv, _ = gae_advantages_returns(r, v, torch.ones_like(r), 0.5, 0.0)
    # δ_t = r_t + γ V_{t+1} - V_t, V past the end = 0
    assert torch.allclose(adv, torch.tensor([[0.0 + 0.5 * 1.0 - 0.5, 2.0 + 0.5 * 0.25 - 1.0, 1.0 - 0.25]]))


def test_environment_tokens_are_bridged_hand_computed():
    # Policy, env, env, policy: the env tokens are skipped as if absent, no discount across them.
    # γ = 0.5, λ = 1; V at the env tokens (9, 9) and a reward there (5) are never read.
    r = torch.tensor([[0.0, 5.0, 0.0, 1.0]])
    v = torch.tensor([[0.2, 9.0, 9.0, 0.6]])
    m = torch.tensor([[1, 0, 0, 1]])
    adv, ret = gae_advantages_returns(r, v, m, 0.5, 1.0)
    # A3 = 1 - 0.6 = 0.4; A0 = 0 + 0.5·0.6 - 0.2 + 0.5·0.4 = 0.3
    assert adv[0, 3].item() == pytest.approx(0.4)
    assert adv[0, 0].item() == pytest.approx(0.3)
    # Same as the row with the env tokens cut out.
    short, _ = gae_advantages_returns(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.2, 0.6]]),
                                      torch.ones(1, 2), 0.5, 1.0)
    assert torch.allclose(adv[:, [0, 3]], short)
    assert ret[0, 0].item() == pytest.approx(0.5)


def test_padding_after_the_completion_carries_nothing():
    r = torch.tensor([[0.0, 1.0, 0.0, 0.0]])
    v = torch.tensor([[0.3, 0.7, 4.0, -2.0]])
    m = torch.tensor([[1, 1, 0, 0]])
    adv, _ = gae_advantages_returns(r, v, m, 0.9, 0.95)
    cut, _ = gae_advantages_returns(r[:, :2], v[:, :2], m[:, :2], 0.9, 0.95)
    assert torch.allclose(adv[:, :2], cut)


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0), (0.0, 0.7)])
def test_random_rows_match_the_loop_and_verl(gamma, lam):
    rng = random.Random(7)
    B, T = 5, 11
    rewards = [[rng.choice([0.0, 0.0, rng.uniform(-1, 1)]) for _ in range(T)] for _ in range(B)]
    values = [[rng.uniform(-1, 1) for _ in range(T)] for _ in range(B)]
    mask = [[1 if rng.random() < 0.7 else 0 for _ in range(T)] for _ in range(B)]
    r, v, m = torch.tensor(rewards, dtype=torch.float64), torch.tensor(values, dtype=torch.float64), \
        torch.tensor(mask, dtype=torch.float64)
    adv, ret = gae_advantages_returns(r, v, m, gamma, lam)
    theirs_adv, theirs_ret = verl_gae(r, v, m, gamma, lam)
    mb = m.bool()
    assert torch.allclose(adv[mb], theirs_adv[mb], atol=1e-12)
    assert torch.allclose(ret[mb], theirs_ret[mb], atol=1e-12)
    for b in range(B):
        want_adv, want_ret = loop_gae(rewards[b], values[b], mask[b], gamma, lam)
        for t in range(T):
            if mask[b][t]:
                assert adv[b, t].item() == pytest.approx(want_adv[t], abs=1e-12)
                assert ret[b, t].item() == pytest.approx(want_ret[t], abs=1e-12)


def test_float32_inputs_match_verl_within_1e_5():
    g = torch.Generator().manual_seed(3)
    r = (torch.rand(8, 40, generator=g) < 0.1).float()
    v = torch.randn(8, 40, generator=g)
    m = (torch.rand(8, 40, generator=g) < 0.8).float()
    adv, ret = gae_advantages_returns(r, v, m, 0.99, 0.95)
    theirs_adv, theirs_ret = verl_gae(r, v, m, 0.99, 0.95)
    assert adv.dtype == torch.float32
    assert torch.allclose(adv, theirs_adv, atol=1e-5) and torch.allclose(ret, theirs_ret, atol=1e-5)


def test_no_gradient_and_shape_errors():
    v = torch.zeros(2, 3, requires_grad=True)
    adv, ret = gae_advantages_returns(torch.zeros(2, 3), v, torch.ones(2, 3), 1.0, 1.0)
    assert not adv.requires_grad and not ret.requires_grad
    with pytest.raises(ValueError, match="same"):
        gae_advantages_returns(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3), 1.0, 1.0)


def test_token_level_rewards_land_on_the_last_policy_token():
    m = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]])
    out = token_level_rewards(torch.tensor([1.0, 0.5, 7.0]), m)
    assert out.tolist() == [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0]]


def test_masked_whiten_hand_computed():
    # masked values 1, 2, 3: mean 2, unbiased var 1 -> -1, 0, 1; the masked 100 is ignored.
    x = torch.tensor([[1.0, 2.0, 100.0, 3.0]], dtype=torch.float64)
    m = torch.tensor([[1, 1, 0, 1]])
    out = masked_whiten(x, m, eps=0.0)
    assert torch.allclose(out[m.bool()], torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64))
    mean, var = masked_mean_var(x, m)
    assert (mean.item(), var.item()) == (2.0, 1.0)
    assert torch.allclose(masked_whiten(x, m, shift_mean=False, eps=0.0)[m.bool()],
                          torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))


def test_explained_variance():
    ret = torch.tensor([[1.0, 0.0, 1.0, 0.0, 5.0]])
    m = torch.tensor([[1, 1, 1, 1, 0]])
    assert explained_variance(ret, ret, m) == pytest.approx(1.0, abs=1e-4)  # perfect critic
    assert explained_variance(torch.full_like(ret, 0.5), ret, m) == pytest.approx(0.0, abs=1e-4)  # the mean
    # V = 1 - R is worse than the mean: Var[R - V] = Var[2R - 1] = 4 Var[R] -> 1 - 4 = -3
    assert explained_variance(1.0 - ret, ret, m) == pytest.approx(-3.0, abs=1e-3)
    assert math.isnan(explained_variance(ret, ret, torch.tensor([[1, 0, 0, 0, 0]])))
