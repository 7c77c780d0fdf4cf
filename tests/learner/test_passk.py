"""pass@k, the unbiased estimator of Chen et al. (2021)."""

from __future__ import annotations

import math

import pytest

from rlvr.learner.watch.passk import mean_pass_at_k, pass_at_k


def test_pass_at_1_is_the_fraction_correct():
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)


def test_pass_at_k_matches_the_closed_form():
    n, c, k = 10, 3, 4
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


def test_edges():
    assert pass_at_k(8, 0, 8) == 0.0
    assert pass_at_k(8, 1, 8) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 8)
    assert mean_pass_at_k([], 8, 1) == 0.0
