"""Many episodes on one endpoint: each key records only its own episode's tokens, closing one leaves the others
working, and the model is listed to both SDKs (real clients, the HF engine on the tiny model)."""

from __future__ import annotations

import asyncio

import anthropic
import openai
import pytest

from rlvr.rollout.agents.session import AgentLimits
from tests.rollout.agents.test_endpoint_openai import _check_segment


def test_concurrent_episodes_keep_their_own_tokens_and_closing_one_leaves_the_others(endpoint, loop, reference,
                                                                                     weight_dirs):
    sessions = [endpoint.open(f"ep-many-{k}", AgentLimits()) for k in range(3)]

    async def agent(k: int, session) -> list[list[float]]:
        client = openai.AsyncOpenAI(base_url=endpoint.base_url + "/v1", api_key=session.key, max_retries=0)
        messages, returned = [{"role": "user", "content": f"Episode {k}: what is {k}+1?"}], []
        for turn in range(2):
            r = await client.chat.completions.create(model="m", messages=messages, logprobs=True)
            returned.append([t.logprob for t in r.choices[0].logprobs.content])
            messages += [{"role": "assistant", "content": r.choices[0].message.content},
                         {"role": "user", "content": f"Episode {k}, turn {turn}: go on."}]
        await client.close()
        return returned

    async def all_of_them():
        return await asyncio.gather(*(agent(k, s) for k, s in enumerate(sessions)))

    returned = loop.run(all_of_them())
    for k, session in enumerate(sessions):
        out = session.outcome()
        assert out.episode.segment_count == 1 and len(out.episode.turns) == 2 and session.requests == 2
        _check_segment(out.prompt_ids, out.completion, reference, weight_dirs, returned[k])
        words = endpoint.codec.decode(out.prompt_ids + out.completion.ids)
        assert f"Episode {k}:" in words and f"Episode {k}, turn 0" in words
        assert not any(f"Episode {j}" in words for j in range(3) if j != k)

    endpoint.close(sessions[0])
    hi = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=endpoint.base_url + "/v1", api_key=sessions[0].key, max_retries=0
                      ).chat.completions.create(model="m", messages=hi)
    openai.OpenAI(base_url=endpoint.base_url + "/v1", api_key=sessions[1].key, max_retries=0
                  ).chat.completions.create(model="m", messages=hi)
    assert sessions[0].requests == 2 and sessions[1].requests == 3  # the refused request counted nowhere


def test_both_sdks_list_and_retrieve_the_model_and_refuse_a_wrong_key_in_their_own_shape(endpoint):
    session = endpoint.open("ep-models", AgentLimits())
    oai = openai.OpenAI(base_url=endpoint.base_url + "/v1", api_key=session.key, max_retries=0)
    assert [m.id for m in oai.models.list()] == ["tiny"] and oai.models.retrieve("gpt-4o").id == "tiny"
    ant = anthropic.Anthropic(base_url=endpoint.base_url, api_key=session.key, max_retries=0)
    listed = list(ant.models.list())
    assert [(m.id, m.type) for m in listed] == [("tiny", "model")] and ant.models.retrieve("claude").id == "tiny"
    with pytest.raises(anthropic.AuthenticationError) as e:
        anthropic.Anthropic(base_url=endpoint.base_url, api_key="wrong", max_retries=0).models.list()
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(openai.AuthenticationError) as e:
        openai.OpenAI(base_url=endpoint.base_url + "/v1", api_key="wrong", max_retries=0).models.retrieve("m")
    assert e.value.code == "invalid_api_key"
    assert session.requests == 0


def test_a_path_not_served_is_a_json_404_naming_the_routes_that_are(endpoint):
    session = endpoint.open("ep-404", AgentLimits())
    oai = openai.OpenAI(base_url=endpoint.base_url + "/v1", api_key=session.key, max_retries=0)
    with pytest.raises(openai.NotFoundError) as e:
        oai.responses.create(model="m", input="hi")  # the Responses API (the OpenAI Agents SDK's default)
    assert "/v1/chat/completions" in e.value.message and "Agents SDK" in e.value.message
    ant = anthropic.Anthropic(base_url=endpoint.base_url, api_key=session.key, max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as e:
        ant.messages.batches.list()
    assert e.value.body["error"]["type"] == "not_found_error" and "/v1/messages" in e.value.body["error"]["message"]
    assert session.requests == 0
