"""The real ``openai`` client (sync and async, streaming and not, with tools) against the agent endpoint on the
HF engine and the tiny model: what the model sampled is recorded as sampled, with its behaviour log-probs, what
the agent added is masked, and an agent that compacts its history yields one training segment per history."""

from __future__ import annotations

import msgspec
import openai
import pytest

from rlvr.protocol.validate import check_sample
from rlvr.rollout.agents.session import AgentLimits
from tests.factories import make_sample
from tests.rollout.agents.conftest import SAMPLING

TOL = 0.01
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]


def _runs(mask: list[int]) -> list[tuple[int, int]]:
    """The [start, end) spans of 1s in ``mask``."""
    spans, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def _check_segment(prompt_ids, completion, reference, weight_dirs, returned: list[list[float]]) -> None:
    """Each model turn of a segment is the span the API returned, with its log-probs as sampled, and a forward
    pass over the segment's whole token sequence gives them: the ids are the sampled ones, in their context."""
    spans = _runs(completion.mask)
    assert [completion.logprobs[a:b] for a, b in spans] == returned
    ref = reference.logprobs(weight_dirs["base"], prompt_ids, completion.ids, 1.0)
    worst = max(abs(completion.logprobs[i] - ref[i]) for i, m in enumerate(completion.mask) if m)
    assert worst < TOL, worst
    assert all(lp == 0.0 for lp, m in zip(completion.logprobs, completion.mask) if not m)


def test_sync_client_turns_are_recorded_as_sampled_and_what_the_agent_added_is_masked(endpoint, reference,
                                                                                       weight_dirs):
    session = endpoint.open("ep-sync", AgentLimits(max_requests=8, max_tokens=64))
    client = openai.OpenAI(base_url=endpoint.base_url + "/v1", api_key=session.key, max_retries=0)
    messages = [{"role": "system", "content": "You add."}, {"role": "user", "content": "What is 2+3?"}]
    returned = []
    for k, stream in enumerate([False, True, False]):
        # The agent's own sampling values are accepted and ignored (the run's apply: 6 tokens at most).
        kwargs = dict(model="gpt-4o", messages=messages, tools=TOOLS, logprobs=True, temperature=0.0, max_tokens=99)
        if stream:
            content, lps, finish = "", [], None
            for chunk in client.chat.completions.create(stream=True, **kwargs):
                delta = chunk.choices[0]
                content += delta.delta.content or ""
                lps += [t.logprob for t in (delta.logprobs.content if delta.logprobs else None) or []]
                finish = delta.finish_reason or finish
            returned.append(lps)
            messages = messages + [{"role": "assistant", "content": content}]
        else:
            r = client.chat.completions.create(**kwargs)
            returned.append([t.logprob for t in r.choices[0].logprobs.content])
            assert r.usage.completion_tokens == len(returned[-1]) <= 6
            messages = messages + [r.choices[0].message.model_dump(exclude_none=True)]
        messages = messages + [{"role": "user", "content": f"Are you sure? ({k})"}]
    out = session.outcome()
    e = out.episode
    assert e.segments == [] and e.segment_count == 1 and len(e.turns) == 3
    assert [(t.start, t.end) for t in e.turns] == _runs(out.completion.mask)
    _check_segment(out.prompt_ids, out.completion, reference, weight_dirs, returned)
    agent_tokens = [i for i, m in zip(out.completion.ids, out.completion.mask) if not m]
    said = endpoint.codec.decode(agent_tokens)
    assert "Are you sure? (0)" in said and "Are you sure? (1)" in said  # the agent's words: masked
    assert out.finish_reason in ("stop", "length") and e.end_reason == "done" and session.requests == 3


def test_async_client_streams_with_usage_and_its_turns_are_recorded(endpoint, loop, reference, weight_dirs):
    session = endpoint.open("ep-async", AgentLimits())

    async def agent() -> list[list[float]]:
        client = openai.AsyncOpenAI(base_url=endpoint.base_url + "/v1", api_key=session.key, max_retries=0)
        messages, returned = [{"role": "user", "content": "What is 8+5?"}], []
        for k in range(2):
            content, lps, usage = "", [], None
            stream = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS, stream=True,
                                                          logprobs=True, stream_options={"include_usage": True})
            async for chunk in stream:
                usage = chunk.usage or usage
                for choice in chunk.choices:
                    content += choice.delta.content or ""
                    lps += [t.logprob for t in (choice.logprobs.content if choice.logprobs else None) or []]
            assert usage is not None and usage.completion_tokens == len(lps)
            returned.append(lps)
            messages += [{"role": "assistant", "content": content}, {"role": "tool", "tool_call_id": "x",
                                                                     "content": f"result {k}"}]
        r = await client.chat.completions.create(model="m", messages=messages, logprobs=True)
        returned.append([t.logprob for t in r.choices[0].logprobs.content])
        await client.close()
        return returned

    returned = loop.run(agent())
    out = session.outcome()
    assert out.episode.segment_count == 1 and len(out.episode.turns) == 3
    _check_segment(out.prompt_ids, out.completion, reference, weight_dirs, returned)
    said = endpoint.codec.decode([i for i, m in zip(out.completion.ids, out.completion.mask) if not m])
    assert "result 0" in said and "result 1" in said


def test_an_agent_that_compacts_its_history_yields_a_segment_per_history_each_masked(endpoint, reference,
                                                                                      weight_dirs):
    session = endpoint.open("ep-compact", AgentLimits())
    client = openai.OpenAI(base_url=endpoint.base_url + "/v1", api_key=session.key, max_retries=0)

    def ask(messages):
        r = client.chat.completions.create(model="m", messages=messages, logprobs=True)
        return r.choices[0].message.content, [t.logprob for t in r.choices[0].logprobs.content]

    long = [{"role": "user", "content": "What is 2+3?"}]
    first = []
    for k in range(2):
        text, lps = ask(long)
        first.append(lps)
        long += [{"role": "assistant", "content": text}, {"role": "user", "content": f"Go on ({k})."}]
    # The agent summarises its history: the new prompt does not extend what was sampled.
    short = [{"role": "system", "content": "Summary: the user asked 2+3."}, {"role": "user", "content": "Answer."}]
    second = []
    for k in range(2):
        text, lps = ask(short)
        second.append(lps)
        short += [{"role": "assistant", "content": text}, {"role": "user", "content": f"Again ({k})."}]
    out = session.outcome()
    e = out.episode
    assert e.segment_count == 2 and len(e.segments) == 1 and e.agent  # its prompt ids are the agent's
    (old,) = e.segments
    assert len(old.turns) == 2 and len(e.turns) == 2  # the Sample's own segment: the last model turn's
    _check_segment(old.prompt_ids, old.completion, reference, weight_dirs, first)
    _check_segment(out.prompt_ids, out.completion, reference, weight_dirs, second)
    assert endpoint.codec.decode(out.prompt_ids).startswith("<|im_start|>system\nSummary")
    assert "Go on (0)." in endpoint.codec.decode([i for i, m in zip(old.completion.ids, old.completion.mask)
                                                  if not m])
    # As the rollout publishes it, the episode passes the checks every consumer runs.
    sample = msgspec.structs.replace(
        make_sample(episode=e), prompt_ids=out.prompt_ids, completion=out.completion, text=out.text,
        policy_version=out.policy_version, policy_version_max=out.policy_version_max, sampling=SAMPLING)
    check_sample(msgspec.msgpack.decode(msgspec.msgpack.encode(sample), type=type(sample)))


def test_a_request_without_a_valid_episode_key_is_refused_and_records_nothing(endpoint):
    import httpx

    session = endpoint.open("ep-keys", AgentLimits())
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    missing = httpx.post(endpoint.base_url + "/v1/chat/completions", json=body)
    assert missing.status_code == 401 and "episode key" in missing.json()["error"]["message"]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=endpoint.base_url + "/v1", api_key="rlvr-guess", max_retries=0).chat.completions.create(
            **body)
    client = openai.OpenAI(base_url=endpoint.base_url + "/v1", api_key=session.key, max_retries=0)
    assert [m.id for m in client.models.list()] == ["tiny"]
    endpoint.close(session)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(**body)
    assert session.requests == 0 and session.outcome().completion.ids == []


def test_bad_bodies_are_refused_400_naming_the_field(endpoint):
    session = endpoint.open("ep-bad", AgentLimits())
    client = openai.OpenAI(base_url=endpoint.base_url + "/v1", api_key=session.key, max_retries=0)
    hi = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=hi, n=2)
    assert e.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=[{"role": "wizard", "content": "hi"}])
    assert "messages[0].role" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=hi, logprobs=True, top_logprobs=3)
    assert e.value.body["param"] == "top_logprobs"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:,"}}]}])
    assert "messages[0].content" in e.value.message
    assert session.requests == 0


def test_limits_end_the_episode_with_their_reason_and_refuse_what_follows(endpoint):
    session = endpoint.open("ep-turns", AgentLimits(max_requests=2))
    client = openai.OpenAI(base_url=endpoint.base_url + "/v1", api_key=session.key, max_retries=0)
    hi = [{"role": "user", "content": "hi"}]
    client.chat.completions.create(model="m", messages=hi)
    client.chat.completions.create(model="m", messages=hi)
    assert not session.limit_hit.is_set()
    with pytest.raises(openai.PermissionDeniedError):
        client.chat.completions.create(model="m", messages=hi)
    assert session.limit_hit.is_set() and session.outcome().episode.end_reason == "max_turns"

    session = endpoint.open("ep-tokens", AgentLimits(max_tokens=8))  # 6 a request at most, 8 in all
    client = openai.OpenAI(base_url=endpoint.base_url + "/v1", api_key=session.key, max_retries=0)
    used = []
    with pytest.raises(openai.PermissionDeniedError):
        for _ in range(9):  # every request generates at least one token: the budget runs out within 8
            used.append(client.chat.completions.create(model="m", messages=hi, max_tokens=1000).usage.completion_tokens)
    assert max(used) <= 6 and sum(used) == 8  # the last request was given only what was left
    assert session.outcome().episode.end_reason == "token_budget"


def test_the_agent_s_reported_reward_becomes_the_episode_s_environment_reward(endpoint):
    import httpx

    session = endpoint.open("ep-reward", AgentLimits())
    client = openai.OpenAI(base_url=endpoint.base_url + "/v1", api_key=session.key, max_retries=0)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    r = client.post("/rlvr/reward", body={"reward": 0.75}, cast_to=httpx.Response)
    assert r.json() == {"reward": 0.75}
    with pytest.raises(openai.BadRequestError):
        client.post("/rlvr/reward", body={"reward": "lots"}, cast_to=httpx.Response)
    with pytest.raises(openai.BadRequestError):
        client.post("/rlvr/reward", body={"reward": 1e300}, cast_to=httpx.Response)
    e = session.outcome().episode
    assert e.env_reward == 0.75 and e.turn_rewards == [0.75]


def test_parallel_requests_from_one_history_are_never_spliced(endpoint, loop):
    """Two requests in flight from the same history (an agent's parallel calls, sub-agents): one extends the
    segment, the other starts its own; both are recorded."""
    import asyncio

    session = endpoint.open("ep-parallel", AgentLimits())

    async def agent():
        client = openai.AsyncOpenAI(base_url=endpoint.base_url + "/v1", api_key=session.key, max_retries=0)
        history = [{"role": "user", "content": "What is 2+3?"}]
        r = await client.chat.completions.create(model="m", messages=history)
        history += [{"role": "assistant", "content": r.choices[0].message.content}]
        both = await asyncio.gather(*(client.chat.completions.create(
            model="m", messages=history + [{"role": "user", "content": f"Branch {k}."}]) for k in range(2)))
        await client.close()
        return both

    loop.run(agent())
    out = session.outcome()
    assert out.episode.segment_count == 2 and session.requests == 3
    turns = sorted([len(out.episode.turns)] + [len(s.turns) for s in out.episode.segments])
    assert turns == [1, 2]  # the first turn and one branch; the other branch alone


def test_a_conversation_past_the_engine_s_prompt_limit_is_refused_and_ends_the_episode(hf_engine, loop):
    from rlvr.rollout.agents.endpoint import AgentEndpoint

    ep = AgentEndpoint(hf_engine, sampling=SAMPLING, tool_format="hermes")  # max_prompt_tokens = 64
    loop.run(ep.start())
    try:
        session = ep.open("ep-long", AgentLimits())
        client = openai.OpenAI(base_url=ep.base_url + "/v1", api_key=session.key, max_retries=0)
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "2+3 " * 100}])
        assert e.value.code == "context_length_exceeded"
        assert session.limit_hit.is_set() and session.outcome().episode.end_reason == "prompt_cap"
    finally:
        loop.run(ep.stop())
