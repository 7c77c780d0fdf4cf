"""The rollout's cuts are end reasons of their own on the wire: an episode that ended ``prompt_cap`` or
``template_rewrite`` round-trips and validates, and both are among the ends the verifier scores error."""

from __future__ import annotations

import typing

import msgspec

from rlvr.protocol import Completion, Episode, Sample, Turn, decode, encode
from rlvr.protocol.samples import CUT_ENDS, ENV_FAILURES, EndReason
from rlvr.protocol.validate import check_sample
from tests.factories import make_sample


def test_a_cut_episode_round_trips_and_validates():
    assert set(CUT_ENDS) <= set(typing.get_args(EndReason)) and set(CUT_ENDS) <= set(ENV_FAILURES)
    for end in CUT_ENDS:
        s = msgspec.structs.replace(
            make_sample(), completion=Completion([5, 6, 7], [-0.1, 0.0, -0.2], [1, 0, 1]),
            episode=Episode("calc", [Turn(0, 1, 0), Turn(2, 3, 0)], end, detail="turn 1: cut"),  # type: ignore[arg-type]
        )
        back = decode(encode(s), Sample)
        assert back == s and back.episode.end_reason == end
        check_sample(back)
