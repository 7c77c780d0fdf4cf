"""The guide's own agent (docs/agents.md, "Train your agent": examples/agent_calc/calc_agent.py), unchanged,
as the rollout calls it: ``solve(client, task)`` on the real ``openai`` client against the endpoint. The model's
words are scripted (a tiny random model writes no tool call): it asks the calculator ("=" in the `ask` format),
the agent answers the call with the tool's result, the model copies it. The episode is one segment, the model's
tokens kept as sampled (mask 1) and the tool's answer masked (0)."""

from __future__ import annotations

import importlib.util

from rlvr.protocol import SamplingParams
from rlvr.rollout.agents.session import AgentLimits
from rlvr.rollout.agents.runner import AgentClient
from tests.conftest import REPO
from tests.rollout.agents.conftest import ScriptedEngine


def _calc_agent():
    spec = importlib.util.spec_from_file_location("calc_agent", REPO / "examples" / "agent_calc" / "calc_agent.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_guide_s_calculator_agent_trains_as_one_masked_segment(loop, tmp_path):
    from transformers import AutoTokenizer

    from rlvr.learner.example.arith_model import build_arith_model
    from rlvr.rollout.agents.endpoint import AgentEndpoint

    model = build_arith_model(tmp_path / "m", hidden=64, layers=1, heads=2, seed=0, tie_embeddings=False, chat=True)
    tok = AutoTokenizer.from_pretrained(model)
    engine = ScriptedEngine(tok, ["=", "4130"], eos=tok.eos_token)
    ep = AgentEndpoint(engine, sampling=SamplingParams(max_tokens=7), tool_format="ask")
    loop.run(ep.start())
    try:
        session = ep.open("ep", AgentLimits())
        client = AgentClient(openai_base_url=ep.base_url + "/v1", anthropic_base_url=ep.base_url, api_key=session.key,
                             reward_url=ep.base_url + "/v1/rlvr/reward", model="rlvr-policy", episode_id="ep",
                             max_requests=2, max_tokens=14, timeout_s=30.0)
        answer = loop.run(_calc_agent().solve(client, {"messages": [{"role": "user", "content": "70*59="}]}))
        out = session.outcome()
    finally:
        loop.run(ep.stop())
    assert answer == "4130"
    assert out.episode.segment_count == 1 and len(out.episode.turns) == 2
    assert tok.decode(out.completion.ids) == "=" + tok.eos_token + "4130=4130" + tok.eos_token
    assert out.completion.mask == [1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
