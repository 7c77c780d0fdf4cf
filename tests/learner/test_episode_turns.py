"""An episode's turns and masked tokens in the step metrics (learner/watch/metrics.py) count the whole episode:
an agent's segments other than the Sample's own are trained, so their turns and tokens count too."""

from __future__ import annotations

import msgspec
import pytest

from rlvr.learner.watch.metrics import episode_metrics
from rlvr.protocol import Completion, Episode, Scored, Turn, Verdict
from rlvr.protocol.samples import Segment
from tests.factories import make_sample

# The Sample's own segment: one model turn of 2 tokens. An earlier one: two model turns around 3 masked tokens.
OWN = Completion([5, 6], [-0.1, -0.2], [1, 1])
EARLIER = Segment([1, 2], Completion([7, 8, 9, 10, 11], [-0.1, 0.0, 0.0, 0.0, -0.1], [1, 0, 0, 0, 1]),
                  [Turn(0, 1, 0), Turn(4, 5, 0)])


def _scored(segments: list[Segment]) -> Scored:
    sample = msgspec.structs.replace(make_sample(episode=Episode("agent", [Turn(0, 2, 0)], "done", segments=segments,
                                                                 agent=True)), completion=OWN)
    return Scored(sample, Verdict(1.0, "ok", "exact"))


def test_episode_turns_count_every_segment_s_turns():
    m = episode_metrics([_scored([EARLIER]), _scored([])])
    assert m["episode_turns_mean"] == pytest.approx((1 + 2 + 1) / 2)  # (own 1 + earlier 2) and 1
    assert _scored([EARLIER, EARLIER]).sample.episode.turn_count == 5


def test_the_masked_share_counts_every_segment_s_tokens():
    m = episode_metrics([_scored([EARLIER])])
    assert m["masked_token_share"] == pytest.approx(3 / 7)  # 3 masked of the 2 + 5 trained completion tokens
