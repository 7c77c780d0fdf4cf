"""Aggregation modes on sequences of different lengths, and micro-batch splits."""

import pytest
import torch

from rlvr.learner.algos.aggregation import aggregate

# Two sequences of lengths 3 and 1 (right-padded to T = 4).
PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, 100.0, 100.0, 100.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4),  # every token weighs the same
        ("seq-mean-token-mean", ((1 + 2 + 3) / 3 + 4 / 1) / 2),  # every sequence weighs the same
        ("seq-mean-token-sum-norm", ((1 + 2 + 3) / 8 + 4 / 8) / 2),  # token sums over the constant L = 8
    ],
)
def test_modes_on_sequences_of_different_lengths(mode, expected):
    assert aggregate(PER_TOKEN, MASK, mode, norm_length=8).item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_micro_batches_sum_to_the_full_batch_loss(mode):
    full = aggregate(PER_TOKEN, MASK, mode, norm_length=8)
    counts = dict(num_tokens=float(MASK.sum()), num_sequences=2.0)
    parts = sum(aggregate(PER_TOKEN[i : i + 1], MASK[i : i + 1], mode, norm_length=8, **counts) for i in range(2))
    assert parts.item() == pytest.approx(full.item())


def test_sum_norm_does_not_depend_on_padding():
    padded_t = torch.cat([PER_TOKEN, torch.full((2, 4), 7.0)], dim=1)
    padded_m = torch.cat([MASK, torch.zeros(2, 4, dtype=torch.bool)], dim=1)
    a = aggregate(PER_TOKEN, MASK, "seq-mean-token-sum-norm", norm_length=8)
    b = aggregate(padded_t, padded_m, "seq-mean-token-sum-norm", norm_length=8)
    assert a.item() == b.item()
