"""Process-supervised advantages (learner/algos/process.py) on hand-computed cases and against the paper's formula."""

from __future__ import annotations

import math
import random

import pytest

from rlvr.learner.algos.process import StepsMalformedError, mix_outcome, process_advantages

S3 = math.sqrt(1 / 3)  # the sample std of [1, 0, 1]


def test_a_hand_computed_group_of_two():
    # Completion 0: steps ending at tokens 1 and 3, rewards 1 then 0; completion 1: one step ending at 2, reward 1.
    # R = [1, 0, 1]: mean 2/3, sample std sqrt(1/3); normalised: +1/3 / s, -2/3 / s, +1/3 / s.
    adv = process_advantages([[1.0, 0.0], [1.0]], [[1, 3], [2]], [5, 4], eps=0.0)
    up, down = (1 / 3) / S3, (-2 / 3) / S3
    expected = [[up + down, up + down, down, down, 0.0], [up, up, up, 0.0]]
    for got, want in zip(adv, expected):
        assert got == pytest.approx(want, abs=1e-12)


def test_a_token_carries_only_the_steps_that_end_at_or_after_it():
    adv = process_advantages([[0.0, 1.0, 0.0]], [[0, 1, 2]], [4], eps=0.0)[0]
    # R = [0, 1, 0]: mean 1/3, std sqrt(1/3); the last token (index 3) follows every step: 0.
    n0, n1 = (-1 / 3) / S3, (2 / 3) / S3
    assert adv == pytest.approx([n0 + n1 + n0, n1 + n0, n0, 0.0])


def _reference(step_rewards, step_ends, lengths, eps):
    """DeepSeekMath Sec. 4.1.3 written literally: normalise over the group, then A_t = sum_{index(j) >= t} r~_j."""
    flat = [r for rs in step_rewards for r in rs]
    mean = sum(flat) / len(flat)
    std = (sum((r - mean) ** 2 for r in flat) / (len(flat) - 1)) ** 0.5
    return [[sum((r - mean) / (std + eps) for r, e in zip(rs, ends) if e >= t) for t in range(n)]
            for rs, ends, n in zip(step_rewards, step_ends, lengths)]


@pytest.mark.parametrize("seed", range(20))
def test_it_equals_the_papers_formula_on_random_groups(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(3, 40) for _ in range(rng.randint(2, 8))]
    ends = [sorted(rng.sample(range(n), rng.randint(1, min(n, 6)))) for n in lengths]
    rewards = [[rng.choice([0.0, 1.0, 0.5, -1.0]) for _ in e] for e in ends]
    if len({r for rs in rewards for r in rs}) < 2:
        rewards[0][0] = 2.0
    got = process_advantages(rewards, ends, lengths)
    want = _reference(rewards, ends, lengths, 1e-6)
    for g, w in zip(got, want):
        assert g == pytest.approx(w, abs=1e-9)


def test_no_signal_gives_zero_advantages():
    assert process_advantages([[1.0], [1.0]], [[0], [1]], [2, 2]) == [[0.0, 0.0], [0.0, 0.0]]
    assert process_advantages([[1.0], []], [[0], []], [2, 3]) == [[0.0, 0.0], [0.0, 0.0, 0.0]]


def test_mixing_adds_the_weighted_outcome_advantage_to_every_token():
    assert mix_outcome([[0.5, -0.5], [0.0]], [1.0, -1.0], 0.5) == [[1.0, 0.0], [-0.5]]


@pytest.mark.parametrize("rewards, ends, lengths, match", [
    ([[1.0, 0.0]], [[3, 1]], [5], "not ascending"),
    ([[1.0]], [[5]], [5], "not ascending within 0..4"),
    ([[1.0, 0.0]], [[1]], [5], "2 step rewards for 1 step ends"),
    ([[1.0]], [[1], [2]], [5, 5], "1 reward lists, 2 end lists"),
])
def test_malformed_steps_are_refused(rewards, ends, lengths, match):
    with pytest.raises(StepsMalformedError, match=match):
        process_advantages(rewards, ends, lengths)
