"""The real ``anthropic`` client (sync and async, streaming and not) against the agent endpoint on the HF engine
and the tiny model: the model's turns are recorded as sampled, the system prompt and the agent's messages are in
the tokens, masked (tool_use and tool_result blocks: test_endpoint_tools.py, where the model's words are fixed)."""

from __future__ import annotations

import anthropic

from rlvr.rollout.agents.session import AgentLimits
from tests.rollout.agents.test_endpoint_openai import TOL, _runs

TOOLS = [{"name": "add", "description": "Add two numbers.", "input_schema": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}]


def _text(message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def test_sync_and_async_anthropic_clients_turns_are_recorded_and_what_the_agent_added_is_masked(
        endpoint, loop, reference, weight_dirs):
    session = endpoint.open("ep-anthropic", AgentLimits())
    client = anthropic.Anthropic(base_url=endpoint.base_url, api_key=session.key, max_retries=0)
    messages = [{"role": "user", "content": "What is 2+3?"}]
    first = client.messages.create(model="claude", max_tokens=1024, system="You add.",
                                   messages=messages, tools=TOOLS, extra_body={"temperature": 0.0, "top_k": 1})
    assert first.stop_reason in ("end_turn", "max_tokens") and first.usage.output_tokens <= 6
    messages += [{"role": "assistant", "content": _text(first)},
                 {"role": "user", "content": [{"type": "text", "text": "Check it."}]}]
    with client.messages.stream(model="claude", max_tokens=1024, system="You add.", messages=messages,
                                tools=TOOLS) as stream:
        second = stream.get_final_message()
    messages += [{"role": "assistant", "content": [{"type": "text", "text": _text(second)}]},
                 {"role": "user", "content": "Once more."}]

    async def agent():
        aclient = anthropic.AsyncAnthropic(base_url=endpoint.base_url, api_key=session.key, max_retries=0)
        third = await aclient.messages.create(model="claude", max_tokens=8, system="You add.", messages=messages,
                                              tools=TOOLS)
        async with aclient.messages.stream(model="claude", max_tokens=8, system="You add.", tools=TOOLS,
                                           messages=[*messages, {"role": "assistant", "content": _text(third)},
                                                     {"role": "user", "content": "Last."}]) as stream:
            fourth = await stream.get_final_message()
        await aclient.close()
        return third, fourth

    third, fourth = loop.run(agent())
    out = session.outcome()
    e = out.episode
    assert e.segment_count == 1 and len(e.turns) == 4
    assert [b - a for a, b in _runs(out.completion.mask)] == [m.usage.output_tokens for m in
                                                              (first, second, third, fourth)]
    ref = reference.logprobs(weight_dirs["base"], out.prompt_ids, out.completion.ids, 1.0)
    assert max(abs(out.completion.logprobs[i] - ref[i]) for i, m in enumerate(out.completion.mask) if m) < TOL
    assert endpoint.codec.decode(out.prompt_ids).startswith("<|im_start|>system\nYou add.")
    said = endpoint.codec.decode([i for i, m in zip(out.completion.ids, out.completion.mask) if not m])
    assert "Check it." in said and "Once more." in said and "Last." in said
    assert out.text == _text(fourth)  # what the verifier reads: the last model turn
