"""Agents the rollout runs, driven through ``AgentRunner.play`` on the HF engine and the tiny model: command
agents on the real ``openai`` client (sync and async, streaming and not, with tools) and the real ``anthropic``
client, a callable agent, and a command agent whose tool call is answered; each episode's recorded tokens are
the model's as sampled (the log-probs the agent was sent) and what the agent added is masked."""

from __future__ import annotations

import json
import sys

import pytest

from rlvr.protocol import SamplingParams
from rlvr.protocol.tasks import ChatMessage
from rlvr.rollout.agents.config import AgentConfig
from rlvr.rollout.agents.runner import AgentRunner
from tests.factories import make_task
from tests.rollout.agents import agent_scripts
from tests.rollout.agents.conftest import ScriptedEngine
from tests.rollout.chat_tokenizers import chat_tokenizer

SAMPLING = SamplingParams(temperature=1.0, max_tokens=6)


def _runs(mask: list[int]) -> list[tuple[int, int]]:
    spans, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def _task(n: int = 1):
    import msgspec

    task = make_task(prompt=[ChatMessage("system", "You add."), ChatMessage("user", "2+3?")], n=n,
                     record={"hint": "small numbers", "answer": "5"})
    return msgspec.structs.replace(task, sampling=SAMPLING)


def _play(loop, endpoint, cfg: AgentConfig, index: int = 0, task=None):
    runner = AgentRunner(cfg, endpoint)
    return runner, loop.run(runner.play(task or _task(), index), timeout=120)


def _command(tmp_path, name: str, source: str, **kw) -> AgentConfig:
    script = agent_scripts.write(tmp_path, name, source)
    return AgentConfig(command=[sys.executable, str(script)], env={"AGENT_OUT": str(tmp_path / "out.json")},
                       timeout_s=60, **kw)


def _check_recorded(out, endpoint, returned: list[list[float]] | None, asked: list[str]) -> None:
    """The model's turns are the spans of mask 1 with the log-probs the agent was sent; the agent's words are
    in the masked tokens, with log-prob 0."""
    e = out.episode
    assert [(t.start, t.end) for t in e.turns] == _runs(out.completion.mask) and len(e.turns) == 2
    if returned is not None:
        assert [out.completion.logprobs[a:b] for a, b in _runs(out.completion.mask)] == returned
    masked = endpoint.codec.decode([i for i, m in zip(out.completion.ids, out.completion.mask) if not m])
    assert all(q in masked for q in asked), masked
    assert all(lp == 0.0 for lp, m in zip(out.completion.logprobs, out.completion.mask) if not m)
    assert e.segments == []


def test_a_sync_openai_agent_streaming_and_not_with_tools_is_recorded_and_answers(endpoint, loop, tmp_path):
    cfg = _command(tmp_path, "sync.py", agent_scripts.OPENAI_SYNC, record_keys=["hint"])
    runner, out = _play(loop, endpoint, cfg, index=1)
    e = out.episode
    assert e.end_reason == "done", e.detail
    assert out.text == "forty-two" and e.env_reward == 0.25  # the JSON line's answer and reward
    assert e.environment == cfg.name and runner.ends == {"done": 1}
    returned = json.loads((tmp_path / "out.json").read_text())
    _check_recorded(out, endpoint, returned, ["Check again 0."])


def test_the_task_the_agent_reads_holds_the_prompt_and_only_the_record_keys_listed(endpoint, loop, tmp_path):
    src = ("import json, os, sys\nt = json.load(sys.stdin)\njson.dump(t, open(os.environ['AGENT_OUT'], 'w'))\n"
           "import openai\nopenai.OpenAI(max_retries=0).chat.completions.create(model='m', messages=t['messages'])\n"
           "print('done')\n")
    _, out = _play(loop, endpoint, _command(tmp_path, "echo.py", src, record_keys=["hint"]), index=2)
    seen = json.loads((tmp_path / "out.json").read_text())
    assert out.episode.end_reason == "done" and out.text == "done"
    assert seen["messages"] == [{"role": "system", "content": "You add."}, {"role": "user", "content": "2+3?"}]
    assert seen["record"] == {"hint": "small numbers"}  # never the gold ("answer"), never the verifier's spec
    assert "5" not in json.dumps({k: v for k, v in seen.items() if k not in ("index", "limits", "sample_index")})
    assert seen["episode_id"] == "t-t0/2" and seen["limits"]["max_requests"] == 16


def test_an_async_openai_agent_streams_and_its_sampling_settings_are_ignored(endpoint, loop, tmp_path):
    _, out = _play(loop, endpoint, _command(tmp_path, "async.py", agent_scripts.OPENAI_ASYNC))
    assert out.episode.end_reason == "done", out.episode.detail
    assert out.text == "7" and out.episode.env_reward == 0.0
    returned = json.loads((tmp_path / "out.json").read_text())
    assert all(len(r) <= SAMPLING.max_tokens for r in returned)  # the agent asked for 999 tokens: the run's 6 hold
    _check_recorded(out, endpoint, returned, ["Check again 0."])


def test_an_anthropic_agent_streaming_and_not_with_tools_is_recorded(endpoint, loop, tmp_path):
    _, out = _play(loop, endpoint, _command(tmp_path, "claude.py", agent_scripts.ANTHROPIC, task_via=["file"]))
    assert out.episode.end_reason == "done", out.episode.detail
    assert out.text == "8"
    _check_recorded(out, endpoint, None, ["Check again 0."])


async def _callable_agent(client, task):
    """A callable agent: the async client, one request, a reward reported through the endpoint."""
    import httpx
    import openai

    oa = openai.AsyncOpenAI(base_url=client.openai_base_url, api_key=client.api_key, max_retries=0)
    r = await oa.chat.completions.create(model=client.model, messages=task["messages"], logprobs=True)
    async with httpx.AsyncClient() as h:
        (await h.post(client.reward_url, json={"reward": 0.5},
                      headers={"authorization": f"Bearer {client.api_key}"})).raise_for_status()
    _callable_agent.seen = [t.logprob for t in r.choices[0].logprobs.content]
    return {"answer": "12"}


def test_a_callable_agent_runs_with_the_same_endpoint_and_its_reported_reward_is_kept(endpoint, loop):
    _, out = _play(loop, endpoint, AgentConfig(callable=f"{__name__}:_callable_agent", timeout_s=60))
    e = out.episode
    assert e.end_reason == "done", e.detail
    assert out.text == "12" and e.env_reward == 0.5 and e.turn_rewards == [0.5]
    assert out.completion.logprobs == _callable_agent.seen and out.completion.mask == [1] * len(out.completion.ids)


CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'


def test_a_command_agent_s_tool_call_is_parsed_and_its_result_masked(loop, tmp_path):
    """The model (scripted: a tiny random model writes no call) calls the agent's tool; the agent answers it."""
    from rlvr.rollout.agents.endpoint import AgentEndpoint

    engine = ScriptedEngine(chat_tokenizer("qwen2.5"), [CALL, "It is 5.", "Yes, 5."])
    ep = AgentEndpoint(engine, sampling=SamplingParams(max_tokens=64), tool_format="hermes")
    loop.run(ep.start())
    try:
        _, out = _play(loop, ep, _command(tmp_path, "tools.py", agent_scripts.OPENAI_SYNC))
    finally:
        loop.run(ep.stop())
    e = out.episode
    assert e.end_reason == "done", e.detail
    assert e.tool_calls == {"add": 1}
    masked = ep.codec.decode([i for i, m in zip(out.completion.ids, out.completion.mask) if not m])
    assert "RESULT" in masked and "Check again 0." in masked
    said = ep.codec.decode([i for i, m in zip(out.completion.ids, out.completion.mask) if m])
    assert CALL in said and "It is 5." in said  # the model's own tokens, call markup and all


@pytest.mark.parametrize("bad", [
    dict(), dict(command=["x"], callable="a:b"), dict(callable="not a path"), dict(command=["x", ""]),
    dict(command=["x"], env={"OPENAI_API_KEY": "k"}), dict(command=["x"], pass_env=["A-B"]),
    dict(command=["x"], task_via=[]), dict(command=["x"], host="not a host!"),
])
def test_bad_agent_config_is_refused_naming_the_key(bad):
    import msgspec

    from rlvr.rollout.config import RolloutConfig

    with pytest.raises(msgspec.ValidationError, match=r"rollout\.agent"):
        msgspec.convert({"agent": bad}, RolloutConfig)


def test_a_missing_program_or_a_callable_that_does_not_import_stops_the_replica_naming_the_key(endpoint):
    from rlvr.rollout.agents.config import AgentConfigError

    with pytest.raises(AgentConfigError, match=r"rollout\.agent\.command: 'no-such-agent-program'"):
        AgentRunner(AgentConfig(command=["no-such-agent-program"]), endpoint)
    with pytest.raises(AgentConfigError, match=r"rollout\.agent\.callable: cannot import"):
        AgentRunner(AgentConfig(callable="no_such_module:agent"), endpoint)
    with pytest.raises(AgentConfigError, match="not an async function"):
        AgentRunner(AgentConfig(callable="json:dumps"), endpoint)


@pytest.mark.parametrize(("stdout", "answer", "reward"), [
    ("", None, None), ("\n  \n", None, None), ("log line\n42\n", "42", None), ("x\n{\"answer\": \"a\\nb\"}\n", "a\nb", None),
    ('{"answer": 3, "reward": 1}', "3", 1), ("{not json", "{not json", None), ('{"other": 1}', '{"other": 1}', None),
])
def test_the_answer_is_stdout_s_last_line_or_its_json_answer(stdout, answer, reward):
    from rlvr.rollout.agents.runner import parse_answer

    assert parse_answer(stdout) == (answer, reward)
