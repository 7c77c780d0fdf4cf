"""Tool calls through both APIs: the model's output parsed with the run's tool format into OpenAI ``tool_calls``
and Anthropic ``tool_use`` blocks, output that is no valid call returned as text, and the agent's echo of a
call (re-rendered by the template its own way) still extending the model's exact tokens.

The engine is scripted (the model's words are fixed: a tiny random model writes no tool call) on a tokenizer
that carries Qwen2.5's real chat template, with its tools branch; these tests are about the wire's shape."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from rlvr.protocol import SamplingParams
from rlvr.rollout.agents.session import AgentLimits
from tests.rollout.agents.conftest import ScriptedEngine
from tests.rollout.chat_tokenizers import chat_tokenizer

CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
OPENAI_TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
ANTHROPIC_TOOLS = [{"name": "add", "description": "Add.", "input_schema": OPENAI_TOOLS[0]["function"]["parameters"]}]


@pytest.fixture
def scripted(loop):
    from rlvr.rollout.agents.endpoint import AgentEndpoint

    made = []

    def make(turns: list[str]):
        engine = ScriptedEngine(chat_tokenizer("qwen2.5"), turns)
        ep = AgentEndpoint(engine, sampling=SamplingParams(max_tokens=64), tool_format="hermes")
        loop.run(ep.start())
        made.append(ep)
        return engine, ep, ep.open("ep", AgentLimits())

    yield make
    for ep in made:
        loop.run(ep.stop())


def _extends(engine: ScriptedEngine, session) -> None:
    """The second request's prompt is the first's tokens, the model's turn as sampled, then the masked rest."""
    first, second = engine.prompts
    out = session.outcome()
    assert out.episode.segment_count == 1 and len(out.episode.turns) == 2
    t0 = out.episode.turns[0]
    assert second[: len(first)] == first == out.prompt_ids
    assert second[len(first):] == out.completion.ids[: out.episode.turns[1].start]
    assert out.completion.mask[t0.start:t0.end] == [1] * (t0.end - t0.start)
    assert set(out.completion.mask[t0.end: out.episode.turns[1].start]) == {0}


def test_openai_tool_calls_are_parsed_and_their_echo_extends_the_sampled_tokens(scripted):
    engine, ep, session = scripted(["Let me add.\n" + CALL, "5"])
    client = openai.OpenAI(base_url=ep.base_url + "/v1", api_key=session.key, max_retries=0)
    messages = [{"role": "user", "content": "What is 2+3?"}]
    r = client.chat.completions.create(model="m", messages=messages, tools=OPENAI_TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me add."
    (call,) = choice.message.tool_calls
    assert call.function.name == "add" and json.loads(call.function.arguments) == {"a": 2, "b": 3}
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "5"}]
    chunks = list(client.chat.completions.create(model="m", messages=messages, tools=OPENAI_TOOLS, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "5"
    _extends(engine, session)


def test_openai_streams_tool_calls_as_chunks(scripted):
    engine, ep, session = scripted([CALL])
    client = openai.OpenAI(base_url=ep.base_url + "/v1", api_key=session.key, max_retries=0)
    calls, finish = [], None
    for chunk in client.chat.completions.create(model="m", messages=[{"role": "user", "content": "2+3?"}],
                                                tools=OPENAI_TOOLS, stream=True):
        calls += chunk.choices[0].delta.tool_calls or []
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("add", {"a": 2, "b": 3})]


def test_anthropic_tool_use_blocks_and_tool_results_extend_the_sampled_tokens(scripted):
    engine, ep, session = scripted([CALL, "5"])
    client = anthropic.Anthropic(base_url=ep.base_url, api_key=session.key, max_retries=0)
    messages = [{"role": "user", "content": "What is 2+3?"}]
    m = client.messages.create(model="claude", max_tokens=1024, system="You add.", messages=messages,
                               tools=ANTHROPIC_TOOLS)
    assert m.stop_reason == "tool_use" and [b.type for b in m.content] == ["tool_use"]
    (use,) = m.content
    assert use.name == "add" and use.input == {"a": 2, "b": 3}
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "5"}]}]
    with client.messages.stream(model="claude", max_tokens=1024, system="You add.", messages=messages,
                                tools=ANTHROPIC_TOOLS) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn" and final.content[0].text == "5"
    _extends(engine, session)


def test_anthropic_streams_tool_use_input_as_json_deltas(scripted):
    engine, ep, session = scripted(["Adding. " + CALL])
    client = anthropic.Anthropic(base_url=ep.base_url, api_key=session.key, max_retries=0)
    with client.messages.stream(model="claude", max_tokens=10, messages=[{"role": "user", "content": "2+3?"}],
                                tools=ANTHROPIC_TOOLS) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["text", "tool_use"] and final.content[0].text == "Adding."
    assert final.content[1].input == {"a": 2, "b": 3} and final.stop_reason == "tool_use"


@pytest.mark.parametrize("said", [
    "<tool_call>{not json}</tool_call>",  # no valid call
    '<tool_call>{"name": "rm", "arguments": {"path": "/"}}</tool_call>',  # a tool the request did not offer
])
def test_output_that_is_no_valid_call_is_returned_as_text(scripted, said):
    engine, ep, session = scripted([said, said])
    r = openai.OpenAI(base_url=ep.base_url + "/v1", api_key=session.key, max_retries=0).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "2+3?"}], tools=OPENAI_TOOLS)
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.content == said
    assert not r.choices[0].message.tool_calls
    m = anthropic.Anthropic(base_url=ep.base_url, api_key=session.key, max_retries=0).messages.create(
        model="c", max_tokens=5, messages=[{"role": "user", "content": "2+3?"}], tools=ANTHROPIC_TOOLS)
    assert m.stop_reason == "end_turn" and [(b.type, b.text) for b in m.content] == [("text", said)]


def test_tool_choice_none_parses_no_call(scripted):
    engine, ep, session = scripted([CALL])
    r = openai.OpenAI(base_url=ep.base_url + "/v1", api_key=session.key, max_retries=0).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "2+3?"}], tools=OPENAI_TOOLS, tool_choice="none")
    assert r.choices[0].message.content == CALL and not r.choices[0].message.tool_calls


def test_anthropic_errors_come_in_anthropic_s_shape(scripted):
    engine, ep, session = scripted([])
    with pytest.raises(anthropic.AuthenticationError) as e:
        anthropic.Anthropic(base_url=ep.base_url, api_key="wrong", max_retries=0).messages.create(
            model="c", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        anthropic.Anthropic(base_url=ep.base_url, api_key=session.key, max_retries=0).messages.create(
            model="c", max_tokens=5, messages=[{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}])
    assert e.value.body["error"]["type"] == "invalid_request_error" and "messages[0].content" in str(e.value)


def test_an_engine_failure_is_a_500_and_ends_the_episode_with_the_failure_kept_for_the_runner(scripted):
    engine, ep, session = scripted([])  # no turn left: generating raises IndexError
    with pytest.raises(openai.InternalServerError):
        openai.OpenAI(base_url=ep.base_url + "/v1", api_key=session.key, max_retries=0).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}])
    assert isinstance(session.failure, IndexError) and session.limit_hit.is_set()
    assert session.outcome().episode.end_reason == "aborted"


def test_each_tool_format_gives_calls_of_offered_tools_and_leaves_the_rest_as_text():
    from rlvr.rollout.agents.replies import parse_reply

    offered = {"calculator": {"properties": {"expression": {"type": "string"}}}, "add": {"properties": {
        "a": {}, "b": {}}}}
    text, calls = parse_reply("Working.\ncalculator(37*8)\nadd(1, 2)", "plain", offered)
    assert [(c.name, c.arguments) for c in calls] == [("calculator", {"expression": "37*8"})]
    assert text == "Working.\n\nadd(1, 2)".strip()  # add takes two parameters: no plain call, left as text
    text, calls = parse_reply('<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}', "llama3", offered)
    assert text == "" and [(c.name, c.arguments) for c in calls] == [("add", {"a": 1, "b": 2})]
    assert parse_reply(CALL, "hermes", None) == (CALL, [])  # no tools offered: text


def test_a_body_over_the_limit_is_refused_413_and_a_stopped_endpoint_closes_every_key(scripted, monkeypatch, loop):
    import httpx

    from rlvr.rollout.agents import endpoint as endpoint_module

    engine, ep, session = scripted(["fine"])
    monkeypatch.setattr(endpoint_module, "MAX_BODY_BYTES", 1000)
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 2000}]}
    r = httpx.post(ep.base_url + "/v1/messages", json=body, headers={"x-api-key": session.key})
    assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"
    assert session.requests == 0 and engine.prompts == []
    loop.run(ep.stop())
    assert session.closed and ep._sessions == {}


def test_a_generation_the_engine_aborted_before_its_first_token_is_a_503_that_records_nothing(scripted):
    from rlvr.rollout.engines.base import Generation, GroupResult

    engine, ep, session = scripted(["after the retry"])
    real = engine.generate_ids
    calls = []

    async def abort_once(prompt_ids, n, sampling):
        calls.append(list(prompt_ids))
        if len(calls) == 1:
            return GroupResult(list(prompt_ids), [Generation([], [], "", "abort")], 0, 0)
        return await real(prompt_ids, n, sampling)

    engine.generate_ids = abort_once
    hi = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.InternalServerError) as e:
        openai.OpenAI(base_url=ep.base_url + "/v1", api_key=session.key, max_retries=0).chat.completions.create(
            model="m", messages=hi)
    assert e.value.status_code == 503 and session.segments == [] and not session.limit_hit.is_set()
    # Aborted again, then answered: the SDK's own retry (on by default) gets the answer.
    calls.clear()
    client = openai.OpenAI(base_url=ep.base_url + "/v1", api_key=session.key, max_retries=1)
    assert client.chat.completions.create(model="m", messages=hi).choices[0].message.content == "after the retry"
    out = session.outcome()
    assert len(calls) == 2 and calls[0] == calls[1] == out.prompt_ids
    assert out.episode.segment_count == 1 and len(out.episode.turns) == 1 and session.requests == 3


def test_an_episode_whose_segments_would_outgrow_one_sample_ends_prompt_cap(scripted, monkeypatch):
    """Segments are recorded only while the episode fits the protocol's bound on one Sample (validate refuses
    more): the request that would pass it is refused, generates nothing, and ends the episode."""
    from rlvr.protocol import validate

    engine, ep, session = scripted(["one", "two", "three"])
    client = openai.OpenAI(base_url=ep.base_url + "/v1", api_key=session.key, max_retries=0)
    for history in ("first history", "second history"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": history}])
    recorded = sum(len(s.prompt_ids) + len(s.ids) for s in session.segments)
    monkeypatch.setattr(validate, "MAX_EPISODE_TOKENS", recorded + 10)  # no room for a prompt and 64 new tokens
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "third history"}])
    assert e.value.code == "context_length_exceeded" and len(engine.prompts) == 2
    out = session.outcome()
    assert out.episode.end_reason == "prompt_cap" and out.episode.segment_count == 2 and session.limit_hit.is_set()


def test_anthropic_count_tokens_is_the_rendered_prompt_s_length_and_records_nothing(scripted):
    engine, ep, session = scripted(["four"])
    client = anthropic.Anthropic(base_url=ep.base_url, api_key=session.key, max_retries=0)
    messages = [{"role": "user", "content": "2+2?"}]
    counted = client.messages.count_tokens(model="c", system="You add.", messages=messages, tools=ANTHROPIC_TOOLS)
    assert session.requests == 0 and session.segments == [] and engine.prompts == []
    client.messages.create(model="c", max_tokens=5, system="You add.", messages=messages, tools=ANTHROPIC_TOOLS)
    assert counted.input_tokens == len(engine.prompts[0]) == len(session.outcome().prompt_ids)
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=ep.base_url, api_key="wrong", max_retries=0).messages.count_tokens(
            model="c", messages=messages)
