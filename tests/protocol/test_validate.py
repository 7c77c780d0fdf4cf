"""protocol/validate.py: real messages pass; each bound is named when broken."""

from __future__ import annotations

import math

import msgspec
import pytest

from rlvr.protocol import Completion, MessageInvalidError, check_message, check_token_ids_in_vocab
from rlvr.protocol.validate import MAX_GROUP_SIZE, MAX_TOKENS
from tests.factories import make_sample, make_scored, make_task


def test_messages_the_roles_produce_pass():
    check_message(make_task())
    check_message(make_sample())
    check_message(make_scored(reward=-1.0))
    # A prompt the rollout rejected: no ids, no tokens, still a valid sample.
    rejected = msgspec.structs.replace(make_sample(), prompt_ids=[], completion=Completion([], []),
                                       finish_reason="rejected")
    check_message(rejected)


@pytest.mark.parametrize(
    ("msg", "reason"),
    [
        (msgspec.structs.replace(make_task(), n=MAX_GROUP_SIZE + 1), f"n must be in [1, {MAX_GROUP_SIZE}]"),
        (msgspec.structs.replace(make_task(), sampling=msgspec.structs.replace(make_task().sampling,
                                                                               max_tokens=MAX_TOKENS + 1)),
         "sampling.max_tokens"),
        (msgspec.structs.replace(make_scored(), verdict=msgspec.structs.replace(make_scored().verdict, reward=math.nan)),
         "verdict.reward must be finite, got nan"),
    ],
)
def test_a_broken_bound_names_the_field(msg, reason):
    with pytest.raises(MessageInvalidError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        check_message(msg)


def test_token_ids_are_checked_against_the_learners_vocabulary():
    sc = make_scored()  # ids up to 6
    check_token_ids_in_vocab(sc, 7)
    with pytest.raises(MessageInvalidError, match=r"completion.ids\[1\] = 6 is outside the learner's vocabulary of 6"):
        check_token_ids_in_vocab(sc, 6)
