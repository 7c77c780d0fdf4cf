"""Episode.segments on the wire: old messages still decode, and every segment is validated where it is consumed
(lengths that agree, a mask of 0s and 1s with a policy token, turns inside it, ids in the learner's vocabulary)."""

from __future__ import annotations

import re

import msgspec
import pytest

from rlvr.protocol import Completion, Episode, Scored, Turn, Verdict, decode, encode
from rlvr.protocol.samples import Segment
from rlvr.protocol.validate import MessageInvalidError, check_scored, check_token_ids_in_vocab
from tests.factories import make_sample

GOOD = Segment([1, 2], Completion([5, 6, 7], [-0.1, 0.0, -0.2], [1, 0, 1]), [Turn(0, 1, 0), Turn(2, 3, 0)])


def _scored(*segments: Segment) -> Scored:
    episode = Episode("agent", [Turn(0, 2, 0)], "done", segments=list(segments))
    return Scored(make_sample(episode=episode), Verdict(1.0, "ok", "exact"))


def test_an_episode_without_segments_is_the_message_it_was_and_one_with_them_round_trips():
    plain = _scored()
    assert b"segments" not in encode(plain)  # omitted: a consumer from before segments reads it unchanged
    assert decode(encode(plain), Scored).sample.episode.segment_count == 1
    both = decode(encode(_scored(GOOD)), Scored)
    assert both.sample.episode.segments == [GOOD] and both.sample.episode.segment_count == 2
    check_scored(both)


@pytest.mark.parametrize("segment, says", [
    (Segment([1], Completion([5, 6], [-0.1], [1, 1]), []), "segments[1].completion has 2 ids, 1 log-probs"),
    (Segment([1], Completion([5, 6], [-0.1, -0.1], [0, 0]), []), "marks no token as the policy's"),
    (Segment([1], Completion([5, 6], [-0.1, -0.1], [1, 2]), []), "values other than 0 and 1"),
    (Segment([], Completion([5], [-0.1], [1]), []), "empty prompt"),
    (Segment([1], Completion([5], [-0.1], [1]), [Turn(0, 3, 0)]), "segments[1].turns[0] spans [0, 3)"),
    (Segment([1], Completion([5], [-0.1], [1]), [Turn(0, 1, 7)]), "outside the sample's versions"),
])
def test_a_bad_segment_is_refused_naming_it(segment, says):
    with pytest.raises(MessageInvalidError, match=re.escape(says)):
        check_scored(_scored(GOOD, segment))


def test_a_segment_s_ids_are_checked_against_the_learner_s_vocabulary():
    check_token_ids_in_vocab(_scored(GOOD), 8)
    bad = msgspec.structs.replace(GOOD, completion=Completion([5, 60], [-0.1, -0.1], [1, 1]))
    with pytest.raises(MessageInvalidError, match=r"episode.segments\[1\].completion.ids\[1\] = 60"):
        check_token_ids_in_vocab(_scored(GOOD, bad), 8)


def test_two_copies_of_an_agent_s_slot_with_other_histories_are_one_slot_and_another_task_prompt_is_not():
    """An agent's prompt ids are its own (generated): a group generated again after a replica died is the same
    slot, a duplicate, not a conflict; another task prompt under the same id still is one."""
    from rlvr.protocol.samples import sample_meaning

    def copy(prompt_ids, prompt="What is 2+3?", agent=True):
        episode = Episode("agent", [Turn(0, 2, 0)], "done", agent=agent)
        return msgspec.structs.replace(make_sample(episode=episode), prompt_ids=prompt_ids, prompt=prompt)

    assert sample_meaning(copy([1, 2, 3])) == sample_meaning(copy([1, 9]))
    assert sample_meaning(copy([1, 2, 3])) != sample_meaning(copy([1, 2, 3], prompt="What is 2+4?"))
    # An environment's episode starts from the task's prompt ids: other ids are other work.
    assert sample_meaning(copy([1, 2, 3], agent=False)) != sample_meaning(copy([1, 9], agent=False))
    assert b"agent" not in encode(make_sample(episode=Episode("env", [Turn(0, 2, 0)], "done")))
