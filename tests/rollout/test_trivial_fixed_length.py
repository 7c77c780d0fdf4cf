"""The trivial engine at a fixed length (``[rollout.engine.lengths]`` with sigma 0): every completion is
exactly ``median_tokens`` long, a million tokens too, the samples issue 46's tests send."""

from __future__ import annotations

import anyio

from rlvr.protocol import SamplingParams
from rlvr.rollout.engines import TrivialEngineConfig, make_engine
from rlvr.rollout.engines.base import TrivialLengthsConfig


def test_sigma_zero_gives_every_completion_the_median_length():
    for tokens in (1, 200_000, 1_000_000):
        engine = make_engine(TrivialEngineConfig(lengths=TrivialLengthsConfig(median_tokens=tokens, sigma=0.0,
                                                                              vocab_size=256)))
        result = anyio.run(engine.generate, "12+7=", 2, SamplingParams(max_tokens=tokens))
        assert [len(g.ids) for g in result.generations] == [tokens, tokens]
        assert all(len(g.logprobs) == tokens and g.finish_reason == "stop" for g in result.generations)
