"""An agent's episode of several segments (Episode.segments) trains each segment as its own sequence, with
its own loss mask and the episode's advantage, while custody stays one Sample message; its segments count in
the step metrics and in the staleness slack."""

from __future__ import annotations

import msgspec
import torch

from rlvr.learner.custody.groups import episode_slack
from rlvr.learner.engine_config import TrainEngineConfig
from rlvr.learner.train.batching import TrainBatchItem, sample_items
from rlvr.learner.train.trainer import Trainer
from rlvr.learner.watch.metrics import episode_metrics
from rlvr.protocol import Completion, Episode, Scored, Turn, Verdict
from rlvr.protocol.samples import Segment
from tests.factories import make_sample
from tests.learner.engine_helpers import make_engine, weights

# The Sample's own segment (the last model turn's): a turn, the agent's tool result, a turn.
OWN = Completion([9, 10, 11, 12, 13, 14], [-4.0, -4.1, 0.0, 0.0, -3.9, -4.2], [1, 1, 0, 0, 1, 1])
# The history before the agent compacted it: a turn, a user message, a turn.
EARLIER = Segment([1, 2, 4], Completion([20, 21, 22, 23, 24], [-4.3, 0.0, 0.0, -4.0, -4.1], [1, 0, 0, 1, 1]),
                  [Turn(0, 1, 0), Turn(3, 5, 0)])


def _scored(i: int, reward: float, segments: list[Segment]) -> Scored:
    episode = Episode("agent", [Turn(0, 2, 0), Turn(4, 6, 0)], "done", segments=segments)
    sample = make_sample(i=i, n=2, episode=episode)
    sample = msgspec.structs.replace(sample, prompt_ids=[1, 2, 3], completion=OWN)
    return Scored(sample, Verdict(reward, "ok" if reward else "wrong", "exact"))


def test_each_segment_is_an_item_of_its_own_with_its_mask_and_the_episode_s_advantage():
    own, earlier = sample_items(_scored(0, 1.0, [EARLIER]).sample, 0.5)
    assert (own.prompt_ids, own.completion_ids, own.completion_mask, own.advantage) == ([1, 2, 3], OWN.ids, OWN.mask,
                                                                                        0.5)
    assert earlier == TrainBatchItem([1, 2, 4], EARLIER.completion.ids, EARLIER.completion.logprobs, 0.5,
                                     "t-t0/0#segment-1", EARLIER.completion.mask)
    assert len(sample_items(_scored(1, 0.0, []).sample, -0.5)) == 1


def test_a_segmented_episode_trains_every_segment(model_dir):
    """The trainer's items for a group with a segmented episode are its sequences; the step on them is the step
    on those sequences written by hand, bit for bit, and the earlier segment moves the weights."""
    cfg = TrainEngineConfig(model_path=str(model_dir))
    group = [_scored(0, 1.0, [EARLIER]), _scored(1, 0.0, [])]
    items = Trainer(cfg, seed=0).items([group])
    assert [it.sample_id for it in items] == ["t-t0/0", "t-t0/0#segment-1", "t-t0/1"]
    adv = items[0].advantage
    assert adv > 0 and items[1].advantage == adv and items[2].advantage < 0

    def step(batch):
        engine = make_engine(model_dir, zero_stage=0, micro_batch_tokens=4096)
        engine.train_step(batch)
        return weights(engine)

    by_hand = [TrainBatchItem([1, 2, 3], OWN.ids, OWN.logprobs, adv, "a", OWN.mask),
               TrainBatchItem([1, 2, 4], EARLIER.completion.ids, EARLIER.completion.logprobs, adv, "b",
                              EARLIER.completion.mask),
               TrainBatchItem([1, 2, 3], OWN.ids, OWN.logprobs, items[2].advantage, "c", OWN.mask)]
    trained = step(items)
    assert all(torch.equal(trained[k], v) for k, v in step(by_hand).items())
    without = step([items[0], items[2]])
    assert any(not torch.equal(trained[k], v) for k, v in without.items())


def test_segments_count_in_the_step_metrics_and_the_staleness_slack():
    batch = [_scored(0, 1.0, [EARLIER, EARLIER]), _scored(1, 0.0, [])]
    m = episode_metrics(batch)
    assert m["episode_segments_mean"] == 2.0 and m["episode_segments_max"] == 3.0
    assert episode_slack(batch[0]) == 2 + 2 + 2 - 1 and episode_slack(batch[1]) == 1
