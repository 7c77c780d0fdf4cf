"""The loss mask of a multi-turn episode: tokens the environment wrote never reach the gradient.

Two engines from the same weights and seed take one optimizer step each on
batches that differ only in environment tokens: their behaviour log-probs
(anywhere in the episode) and the content of the environment's last message
(the trailing tokens, which no policy token follows). Their weights must be
bit-for-bit equal afterwards, under every loss aggregation and with KL and
truncated importance sampling on. Changing one *policy* token's behaviour
log-prob must change them: the comparison is not vacuous.
"""

from __future__ import annotations

import msgspec
import pytest
import torch

from rlvr.learner.train.engine import TrainBatchItem
from rlvr.learner.algos.config import PolicyLossConfig as LossConfig
from tests.learner.engine_helpers import VOCAB, make_engine, weights

# An episode: policy turn (4 tokens), environment reply (3), policy turn (3), environment's last message (2).
MASK = [1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0]


def _episode(env_logprob: float = -0.5, last_message: tuple[int, int] = (7, 8), bump: float = 0.0) -> list:
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (len(MASK),), generator=gen).tolist()
    ids[-2:] = last_message
    behaviour = [(-3.9 + 0.2 * torch.randn(1, generator=gen).item()) if m else env_logprob for m in MASK]
    behaviour[1] += bump
    other = TrainBatchItem([1, 2, 3], [9, 10, 11], [-4.0, -4.1, -3.9], -1.0, "single")  # a single-turn sample too
    return [TrainBatchItem([1, 2, 5], ids, behaviour, 1.0, "episode", list(MASK)), other]


def _step(model_dir, items, loss: LossConfig) -> dict[str, torch.Tensor]:
    engine = make_engine(model_dir, zero_stage=0, loss=loss, micro_batch_tokens=4096)
    engine.train_step(items)
    return weights(engine)


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_environment_tokens_leave_the_gradient_bit_for_bit_unchanged(model_dir, aggregation):
    loss = msgspec.convert({"aggregation": aggregation, "tis_cap": 2.0, "kl_coef": 0.05}, LossConfig)
    base = _step(model_dir, _episode(), loss)
    changed = _step(model_dir, _episode(env_logprob=-17.0, last_message=(41, 42)), loss)
    assert all(torch.equal(base[k], changed[k]) for k in base)
    moved = _step(model_dir, _episode(bump=0.7), loss)  # a policy token's behaviour log-prob
    assert any(not torch.equal(base[k], moved[k]) for k in base)


def test_a_single_turn_sample_is_an_episode_of_one_turn(model_dir):
    loss = LossConfig()
    (episode, single) = _episode()
    as_list = TrainBatchItem(single.prompt_ids, single.completion_ids, single.behaviour_logprobs, single.advantage,
                             single.sample_id, [1] * len(single.completion_ids))
    assert all(torch.equal(a, b) for a, b in zip(_step(model_dir, [episode, single], loss).values(),
                                                 _step(model_dir, [episode, as_list], loss).values()))
