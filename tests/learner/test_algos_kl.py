"""KL estimators: hand-computed values and k3's non-negativity."""

import math

import pytest
import torch

from rlvr.learner.algos.kl import k1, k2, k3


def test_estimators_against_hand_values():
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    assert k1(logp, ref).item() == pytest.approx(math.log(2))
    assert k2(logp, ref).item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert k3(logp, ref).item() == pytest.approx(0.5 - 1 - math.log(0.5))  # r - 1 - log r, r = π_ref/π
    assert k3(logp, logp).item() == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_k3_is_non_negative_on_random_inputs(dtype):
    gen = torch.Generator().manual_seed(1234)
    logp = -torch.rand(64, 257, generator=gen) * 12  # log-probs in (-12, 0]
    # Differences from 1e-9 to 10 in magnitude, both signs: the tiny ones are where
    # exp(x) - 1 - x would cancel below zero in float32.
    scale = 10.0 ** (torch.rand(64, 257, generator=gen) * 10 - 9)
    sign = torch.where(torch.rand(64, 257, generator=gen) < 0.5, -1.0, 1.0)
    ref = logp + sign * scale
    out = k3(logp.to(dtype), ref.to(dtype))
    assert torch.isfinite(out).all()
    assert (out >= 0).all(), out.min()
