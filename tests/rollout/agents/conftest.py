"""The agent endpoint's fixtures: the HF engine on the tiny model with room for a conversation, an endpoint
on it, and a scripted engine (what the model says is fixed) for tests about the wire's shape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rlvr.protocol import SamplingParams
from rlvr.rollout.engines.base import Generation, GroupResult
from rlvr.rollout.transcript import HFChatCodec

SAMPLING = SamplingParams(temperature=1.0, max_tokens=6)


@pytest.fixture(scope="session")
def agent_engine(tiny_model, loop) -> Iterator[Any]:
    """The HF engine on the tiny model, with a prompt limit long enough for several turns."""
    from rlvr.rollout.engines import HFEngineConfig, make_engine

    engine = make_engine(HFEngineConfig(model=str(tiny_model), max_prompt_tokens=1024, max_batch=8))
    loop.run(engine.start())
    yield engine
    loop.run(engine.close())


@pytest.fixture
def endpoint(agent_engine, loop) -> Iterator[Any]:
    from rlvr.rollout.agents.endpoint import AgentEndpoint

    ep = AgentEndpoint(agent_engine, sampling=SAMPLING, tool_format="hermes", model_name="tiny")
    loop.run(ep.start())
    yield ep
    loop.run(ep.stop())


class ScriptedEngine:
    """Says the given turns in order, each ended by the template's end-of-turn token, with log-prob -0.5 per
    token: a model whose words are fixed, for tests of the wire's shape."""

    def __init__(self, tokenizer: Any, turns: list[str], eos: str = "<|im_end|>") -> None:
        self.tok, self.turns, self.eos = tokenizer, list(turns), eos
        self.weights_version = 0
        self.prompts: list[list[int]] = []

    def chat_codec(self) -> HFChatCodec:
        return HFChatCodec(self.tok)

    async def generate_ids(self, prompt_ids, n, sampling) -> GroupResult:
        self.prompts.append(list(prompt_ids))
        text = self.turns.pop(0)
        ids = self.tok(text + self.eos, add_special_tokens=False)["input_ids"]
        return GroupResult(list(prompt_ids), [Generation(ids, [-0.5] * len(ids), text, "stop")], 0, 0)
