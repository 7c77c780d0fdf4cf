"""OpenEnv: episodes against a real OpenEnv server (openenv-core, served by uvicorn on a free port)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import anyio
import msgspec
import pytest

from rlvr.protocol import SamplingParams, Task, VerifierSpec
from rlvr.protocol.tasks import EnvSpec
from rlvr.rollout.engines.base import TrivialEngineConfig
from rlvr.rollout.engines.trivial import TrivialEngine
from rlvr.rollout.episodes import EpisodeSettings, run_episode
from tests.conftest import REPO, wait_for
from tests.rollout.test_episodes import ScriptedEngine

pytest.importorskip("openenv", reason="the OpenEnv adapter's tests need openenv-core (pip install 'rlvr-actor[env]')")


@pytest.fixture(scope="module")
def quiz_server(tmp_path_factory):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path_factory.mktemp("openenv") / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "tests.openenv_quiz_server:app", "--host", "127.0.0.1",
                             "--port", str(port), "--log-level", "warning"], cwd=REPO, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return urllib.request.urlopen(url + "/health", timeout=0.5).status == 200
        except OSError:
            return False

    try:
        wait_for(healthy, timeout_s=60, what="the OpenEnv server's /health")
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()


def _task(url: str, **params) -> Task:
    return Task(run="t", task_id="t-t1", dataset="d", index=1, prompt="Answer each sum with the number only.",
                verifier=VerifierSpec("env"), n=4, sampling=SamplingParams(max_tokens=8, seed=1), policy_version=0,
                created_at=time.time(),
                env=EnvSpec("openenv", {"url": url, "action": "text", "observation_field": "question", **params}))


def test_episodes_against_an_openenv_server_run_to_done_with_its_rewards(quiz_server):
    engine = TrivialEngine(TrivialEngineConfig(accuracy=1.0))
    task = _task(quiz_server, max_concurrent=2)

    async def main():
        results = [None] * task.n

        async def one(i):
            results[i] = await run_episode(engine, task, i, EpisodeSettings(env_timeout_s=30))

        async with anyio.create_task_group() as tg:  # four episodes, at most two sessions at once
            for i in range(task.n):
                tg.start_soon(one, i)
        return results

    for r in anyio.run(main):
        e = r.episode
        assert e.end_reason == "done" and e.turn_rewards == [1.0, 1.0, 1.0] and e.env_reward == 3.0, e
        assert e.transcript[1][0] == "user" and e.transcript[1][1].endswith("=")  # the server's first question


def test_a_server_that_is_not_there_is_an_env_error_not_a_zero():
    engine = TrivialEngine(TrivialEngineConfig(accuracy=1.0))
    r = anyio.run(run_episode, engine, _task("http://127.0.0.1:9"), 0, EpisodeSettings(env_timeout_s=10))
    assert r.episode.end_reason == "env_error" and "reset()" in r.episode.detail


def test_the_model_can_run_python_in_the_sandbox_before_it_answers_the_server(quiz_server):
    from rlvr.rollout.builtin_tools import use_sandbox
    from rlvr.sandbox.config import SandboxConfig

    use_sandbox(SandboxConfig())
    task = _task(quiz_server, tools=["python"])
    # The quiz's first sum, for this task's seed, as the server will ask it.
    probe = anyio.run(run_episode, TrivialEngine(TrivialEngineConfig(accuracy=1.0)), task, 0, EpisodeSettings())
    first = probe.episode.transcript[1][1]
    engine = ScriptedEngine(['<tool_call>{"name": "python", "arguments": {"code": "print(%s)"}}</tool_call>'
                             % first.rstrip("="), str(eval(first.rstrip("="))), "0", "0"])
    r = anyio.run(run_episode, engine, msgspec.structs.replace(task), 0, EpisodeSettings(tool_timeout_s=30))
    assert r.episode.tool_calls == {"python": 1} and not r.episode.tool_errors
    assert r.episode.turn_rewards[:2] == [0.0, 1.0] and r.episode.end_reason == "done"
    assert f"tool: {eval(first.rstrip('='))}" in engine.prompts[1]  # the sandbox's answer, before the model's
