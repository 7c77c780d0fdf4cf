"""Token-level advantages (process rewards) reach the loss exactly: the same step as per-sequence ones when equal,
and a token with advantage 0 adds nothing to the gradient."""

from __future__ import annotations

import msgspec
import pytest
import torch

from rlvr.learner.algos.config import PolicyLossConfig as LossConfig
from rlvr.learner.train.batching import TrainItemMalformedError, build_micro_batch, check_item
from rlvr.learner.train.engine import TrainBatchItem
from tests.learner.engine_helpers import make_engine, weights

BEHAVIOUR = [-4.0, -4.1, -3.9, -4.2]


def _items(token_adv: list[float] | None = None, adv: float = 0.7) -> list[TrainBatchItem]:
    a = TrainBatchItem([1, 2, 3], [9, 10, 11, 12], BEHAVIOUR, adv, "a", token_advantages=token_adv or [])
    b = TrainBatchItem([1, 5], [6, 7], [-4.0, -4.3], -0.4, "b")  # a per-sequence neighbour in the same batch
    return [a, b]


def _step(model_dir, items, loss: LossConfig) -> dict[str, torch.Tensor]:
    engine = make_engine(model_dir, zero_stage=0, loss=loss, micro_batch_tokens=4096)
    engine.train_step(items)
    return weights(engine)


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean"])
def test_equal_token_advantages_train_exactly_as_one_per_sequence(model_dir, aggregation):
    loss = msgspec.convert({"aggregation": aggregation, "dual_clip_c": 3.0, "kl_coef": 0.05}, LossConfig)
    per_sequence = _step(model_dir, _items(), loss)
    per_token = _step(model_dir, _items([0.7] * 4), loss)
    assert all(torch.equal(per_sequence[k], per_token[k]) for k in per_sequence)
    different = _step(model_dir, _items([0.7, 0.7, -0.7, 0.7]), loss)
    assert any(not torch.equal(per_sequence[k], different[k]) for k in per_sequence)


def test_a_token_with_zero_advantage_adds_nothing_to_the_gradient(model_dir):
    # Sample a alone: the gradient with token advantages [0, 0, 0, x] on all four tokens equals the
    # gradient of the same sample masked to its last token with advantage x (sum aggregation over one
    # sequence differs only in the denominator, so compare under seq-mean-token-sum-norm).
    loss = msgspec.convert({"aggregation": "seq-mean-token-sum-norm", "norm_length": 4}, LossConfig)
    only_last = TrainBatchItem([1, 2, 3], [9, 10, 11, 12], BEHAVIOUR, 0.9, "a", [0, 0, 0, 1])
    zero_first = TrainBatchItem([1, 2, 3], [9, 10, 11, 12], BEHAVIOUR, 0.0, "a", token_advantages=[0.0, 0.0, 0.0, 0.9])
    a, b = _step(model_dir, [only_last], loss), _step(model_dir, [zero_first], loss)
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-7), k


def test_the_micro_batch_carries_token_advantages_at_the_target_positions():
    mb = build_micro_batch(_items([0.1, 0.2, 0.3, 0.4]), pad_token_id=0)
    assert mb.advantages.shape == mb.loss_mask.shape
    assert mb.advantages[0, 2:6].tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert mb.advantages[1, 1:3].tolist() == pytest.approx([-0.4, -0.4])  # the neighbour's one advantage, spread
    assert float(mb.advantages[~mb.loss_mask].abs().sum()) == 0.0
    assert build_micro_batch(_items(), pad_token_id=0).advantages.shape == (2,)


@pytest.mark.parametrize("token_adv", [[0.1, 0.2], [0.1, float("nan"), 0.1, 0.1]])
def test_token_advantages_of_the_wrong_length_or_not_finite_are_refused(token_adv):
    with pytest.raises(TrainItemMalformedError, match="token advantages"):
        check_item(_items(token_adv)[0])
