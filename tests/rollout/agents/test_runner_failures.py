"""Agents that hang, crash, run past a limit, or are cancelled: the episode ends with its reason and detail
(never a reward), ``play`` returns, and no process of the agent's is left, even one that left its process
group (checked by pid); a callable agent that ignores cancellation is abandoned, not waited for."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time

import pytest

from rlvr.rollout.agents.config import AgentConfig
from rlvr.rollout.agents.runner import AgentRunner
from tests.factories import make_task
from tests.rollout.agents import agent_scripts


def _gone(pids: list[int]) -> list[int]:
    """The pids of ``pids`` still alive (a zombie counts: nobody reaped it)."""
    return [p for p in pids if os.path.exists(f"/proc/{p}")]


def _agent(tmp_path, kind: str, **kw) -> tuple[AgentConfig, os.PathLike]:
    script = agent_scripts.write(tmp_path, f"{kind}.py", agent_scripts.hanging_agent(kind))
    out = tmp_path / "pids"
    return AgentConfig(command=[sys.executable, str(script)], env={"AGENT_OUT": str(out)}, **kw), out


def _pids(out) -> list[int]:
    return [int(p) for p in out.read_text().split()]


def test_an_agent_that_hangs_is_stopped_at_its_wall_time_env_timeout_and_reaped(endpoint, loop, tmp_path):
    cfg, out = _agent(tmp_path, "hang", timeout_s=3)
    runner = AgentRunner(cfg, endpoint)
    started = time.monotonic()
    res = loop.run(runner.play(make_task(n=1), 0), timeout=60)
    assert time.monotonic() - started < 3 + 10  # the wall time, plus the stop's grace at most
    e = res.episode
    assert e.end_reason == "env_timeout" and "rollout.agent.timeout_s = 3s" in e.detail
    assert res.finish_reason == "abort" and e.env_reward == 0.0 and e.turn_rewards == []
    pids = _pids(out)
    assert len(pids) == 3 and _gone(pids) == []  # the agent, its escaped daemon, its child in its group
    assert runner.ends == {"env_timeout": 1} and runner.running == 0


def test_an_agent_that_crashes_ends_env_error_with_its_status_and_stderr_and_is_reaped(endpoint, loop, tmp_path):
    cfg, out = _agent(tmp_path, "crash", timeout_s=60)
    res = loop.run(AgentRunner(cfg, endpoint).play(make_task(n=1), 0), timeout=60)
    e = res.episode
    assert e.end_reason == "env_error"
    assert "exited with status 3" in e.detail and "boom: the agent broke" in e.detail
    assert _gone(_pids(out)) == []


def test_an_agent_past_max_requests_is_stopped_and_ends_max_turns(endpoint, loop, tmp_path):
    cfg, out = _agent(tmp_path, "loop", timeout_s=60, max_requests=2)
    started = time.monotonic()
    res = loop.run(AgentRunner(cfg, endpoint).play(make_task(n=1), 0), timeout=60)
    assert time.monotonic() - started < 30  # stopped at the refusal, not at its wall time
    e = res.episode
    assert e.end_reason == "max_turns" and "max_requests = 2" in e.detail
    # It asked the same question twice: two conversations, each a segment with its model turn.
    assert e.segment_count == 2 and len(e.turns) + sum(len(s.turns) for s in e.segments) == 2
    assert _gone(_pids(out)) == []


def test_a_cancelled_episode_a_weight_reload_s_abort_stops_and_reaps_the_agent(endpoint, loop, tmp_path):
    cfg, out = _agent(tmp_path, "hang", timeout_s=60)
    runner = AgentRunner(cfg, endpoint)

    async def cancel_once_running() -> None:
        play = asyncio.ensure_future(runner.play(make_task(n=1), 0))
        deadline = time.monotonic() + 30
        while not (out.exists() and len(out.read_text().split()) == 3) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # polling a condition, with a deadline
        play.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await play

    loop.run(cancel_once_running(), timeout=60)
    assert _gone(_pids(out)) == [] and runner.running == 0


def test_the_agent_sees_only_the_environment_it_is_given(endpoint, loop, tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_TEST_SECRET", "s3cret")
    src = ("import json, os\nimport openai\n"
           "openai.OpenAI(max_retries=0).chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'x'}])\n"
           "json.dump(dict(os.environ), open(os.environ['AGENT_OUT'], 'w'))\nprint('ok')\n")
    script = agent_scripts.write(tmp_path, "env.py", src)
    cfg = AgentConfig(command=[sys.executable, str(script)], env={"AGENT_OUT": str(tmp_path / "env.json"),
                                                                  "MY_SETTING": "1"})
    res = loop.run(AgentRunner(cfg, endpoint).play(make_task(n=1), 0), timeout=60)
    env = json.loads((tmp_path / "env.json").read_text())
    assert res.episode.end_reason == "done", res.episode.detail
    assert "RLVR_TEST_SECRET" not in env and env["MY_SETTING"] == "1"
    assert env["OPENAI_BASE_URL"] == endpoint.base_url + "/v1" and env["ANTHROPIC_BASE_URL"] == endpoint.base_url
    assert env["OPENAI_API_KEY"] == env["ANTHROPIC_API_KEY"] and env["OPENAI_API_KEY"].startswith("rlvr-")
    assert env["RLVR_EPISODE_ID"] == "t-t0/0" and env["RLVR_REWARD_URL"].endswith("/v1/rlvr/reward")


async def _hangs(client, task):
    await asyncio.sleep(1000)


async def _blocks(client, task):
    time.sleep(8)  # blocking code in an async agent: it cannot be cancelled


async def _raises(client, task):
    raise RuntimeError("the agent's own bug")


async def _answers_without_asking(client, task):
    return "5"


@pytest.mark.parametrize(("fn", "reason", "detail"), [
    ("_hangs", "env_timeout", "timeout_s = 2s"),
    ("_raises", "env_error", "RuntimeError: the agent's own bug"),
    ("_answers_without_asking", "env_error", "without a request to the model"),
])
def test_a_callable_agent_that_hangs_raises_or_never_asks_ends_with_its_reason(endpoint, loop, fn, reason, detail):
    runner = AgentRunner(AgentConfig(callable=f"{__name__}:{fn}", timeout_s=2), endpoint)
    res = loop.run(runner.play(make_task(n=1), 0), timeout=60)
    assert res.episode.end_reason == reason and detail in res.episode.detail
    assert res.finish_reason == "abort" and runner.abandoned == 0


def test_a_callable_agent_that_blocks_is_abandoned_and_the_episode_ends_env_timeout(endpoint, loop):
    runner = AgentRunner(AgentConfig(callable=f"{__name__}:_blocks", timeout_s=1), endpoint)
    started = time.monotonic()
    res = loop.run(runner.play(make_task(n=1), 0), timeout=60)
    assert time.monotonic() - started < 7.5  # wall time and the grace, not the 8 s the agent blocks
    assert res.episode.end_reason == "env_timeout" and runner.abandoned == 1
