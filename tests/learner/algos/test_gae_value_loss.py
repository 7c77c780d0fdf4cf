"""PPO's clipped value loss against the formula written out (a loop over tokens), hand-computed
cases, and verl's ``compute_value_loss`` restated below on the same tensors."""

import pytest
import torch

from rlvr.learner.algos.value_loss import value_loss


def verl_value_loss(vpreds, returns, values, response_mask, cliprange_value):
    """verl.trainer.ppo.core_algos.compute_value_loss with loss_agg_mode = "token-mean"."""
    vpredclipped = torch.clamp(vpreds, values - cliprange_value, values + cliprange_value)
    vf_losses1 = (vpreds - returns) ** 2
    vf_losses2 = (vpredclipped - returns) ** 2
    clipped = torch.max(vf_losses1, vf_losses2)
    m = response_mask.float()
    loss = 0.5 * (clipped * m).sum() / m.sum()
    clipfrac = (torch.gt(vf_losses2, vf_losses1).float() * m).sum() / m.sum()
    return loss, clipfrac


def loop_value_loss(v, r, old, mask, eps):
    total, n, clipped = 0.0, 0, 0
    for b in range(len(v)):
        for t in range(len(v[b])):
            if not mask[b][t]:
                continue
            v_clip = old[b][t] + min(max(v[b][t] - old[b][t], -eps), eps)
            a, c = (v[b][t] - r[b][t]) ** 2, (v_clip - r[b][t]) ** 2
            total += max(a, c)
            clipped += c > a
            n += 1
    return 0.5 * total / n, clipped / n


def test_hand_computed():
    # token 1: V = 1.0, V_old = 0.5, R = 2: V moved 0.5 > ε = 0.2, V_clip = 0.7;
    #   (1 - 2)² = 1, (0.7 - 2)² = 1.69 -> 1.69 (clipped is larger)
    # token 2: V = 0.4, V_old = 0.5, R = 0: inside the clip; (0.4)² = 0.16
    # token 3: masked.  L = 0.5 · (1.69 + 0.16) / 2 = 0.4625, clip fraction 1/2
    v = torch.tensor([[1.0, 0.4, 9.0]], requires_grad=True)
    loss, frac = value_loss(v, torch.tensor([[2.0, 0.0, 0.0]]), torch.tensor([[0.5, 0.5, 0.0]]),
                            torch.tensor([[1, 1, 0]]), 0.2)
    assert loss.item() == pytest.approx(0.4625)
    assert frac.item() == pytest.approx(0.5)
    loss.backward()
    # token 1's clipped branch has no gradient (V_clip is constant there); token 2: 0.5·2·0.4/2 = 0.2
    assert v.grad[0].tolist() == pytest.approx([0.0, 0.2, 0.0])


def test_no_clip_is_half_the_mean_squared_error():
    v = torch.tensor([[1.0, 3.0]])
    loss, frac = value_loss(v, torch.tensor([[0.0, 1.0]]), torch.tensor([[50.0, -50.0]]), torch.ones(1, 2), None)
    assert loss.item() == pytest.approx(0.5 * (1.0 + 4.0) / 2)
    assert frac.item() == 0.0


@pytest.mark.parametrize("eps", [0.05, 0.2, 0.5])
def test_random_tensors_match_the_loop_and_verl(eps):
    g = torch.Generator().manual_seed(11)
    v, r, old = torch.randn(4, 9, generator=g), torch.randn(4, 9, generator=g), torch.randn(4, 9, generator=g)
    m = (torch.rand(4, 9, generator=g) < 0.7).long()
    loss, frac = value_loss(v, r, old, m, eps)
    want_loss, want_frac = loop_value_loss(v.tolist(), r.tolist(), old.tolist(), m.tolist(), eps)
    assert loss.item() == pytest.approx(want_loss, rel=1e-5)
    assert frac.item() == pytest.approx(want_frac, rel=1e-6)
    theirs, theirs_frac = verl_value_loss(v, r, old, m, eps)
    assert torch.allclose(loss, theirs, rtol=1e-5) and torch.allclose(frac, theirs_frac)


def test_micro_batches_sum_to_the_full_batch_loss():
    g = torch.Generator().manual_seed(5)
    v, r, old = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    m = (torch.rand(6, 5, generator=g) < 0.8).long()
    full, _ = value_loss(v, r, old, m, 0.2)
    n = float(m.sum())
    parts = sum(value_loss(v[i:i + 2], r[i:i + 2], old[i:i + 2], m[i:i + 2], 0.2, num_tokens=n)[0]
                for i in range(0, 6, 2))
    assert parts.item() == pytest.approx(full.item(), rel=1e-6)
