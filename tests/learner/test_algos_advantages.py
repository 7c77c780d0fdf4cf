"""Advantage estimators against values computed by hand from the paper equations."""

import math

import msgspec
import pytest
import torch

from rlvr.learner.algos.advantages import AdvantageConfig, AdvantageUnknownError, compute_advantages


def _adv(name: str, rewards: list) -> torch.Tensor:
    return compute_advantages(torch.tensor(rewards, dtype=torch.float64), AdvantageConfig(name=name, eps=1e-6))


@pytest.mark.parametrize("name", ["grpo", "drgrpo", "rloo"])
def test_zero_variance_group_gives_zero_advantages(name):
    assert torch.equal(_adv(name, [1.0, 1.0, 1.0, 1.0]), torch.zeros(4, dtype=torch.float64))
    assert torch.equal(_adv(name, [0.0, 0.0, 0.0]), torch.zeros(3, dtype=torch.float64))


def test_grpo_standardises_with_sample_std():
    # mean 0.5; sample std = sqrt(4 * 0.25 / 3) = 1/sqrt(3); A = ±0.5 * sqrt(3)
    a = 0.5 / (1 / math.sqrt(3) + 1e-6)
    assert torch.allclose(_adv("grpo", [1.0, 0.0, 0.0, 1.0]), torch.tensor([a, -a, -a, a], dtype=torch.float64), atol=1e-12)


def test_drgrpo_only_centres():
    assert torch.allclose(_adv("drgrpo", [1.0, 0.0, 0.0, 0.0]), torch.tensor([0.75, -0.25, -0.25, -0.25], dtype=torch.float64))


def test_rloo_leaves_one_out():
    # A_0 = 1 - mean(0,0,0) = 1; A_i = 0 - mean(1,0,0) = -1/3
    expected = torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3], dtype=torch.float64)
    assert torch.allclose(_adv("rloo", [1.0, 0.0, 0.0, 0.0]), expected)


@pytest.mark.parametrize("name", ["grpo", "drgrpo", "rloo"])
def test_batched_groups_are_independent(name):
    rows = [[1.0, 0.0, 0.5, 0.25], [2.0, 2.0, 2.0, 2.0], [0.0, 3.0, 1.0, 1.0]]
    batched = _adv(name, rows)
    assert batched.shape == (3, 4)
    for i, row in enumerate(rows):
        assert torch.allclose(batched[i], _adv(name, row))


@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_group_of_one_is_zero_not_nan(name):
    assert torch.equal(_adv(name, [0.7]), torch.zeros(1, dtype=torch.float64))


def test_unknown_estimator_is_named():
    with pytest.raises(AdvantageUnknownError, match="nope"):
        compute_advantages(torch.zeros(2), AdvantageConfig(name="nope"))  # type: ignore[arg-type]
    with pytest.raises(msgspec.ValidationError, match="name"):
        msgspec.json.decode(b'{"name": "nope"}', type=AdvantageConfig)
