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


def _serve(log_dir):
    """The quiz server under uvicorn on a free port: (process, url, log file), once /health answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(log_dir / "server.log", "wb")
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
    except BaseException:
        _stop(proc, log)
        raise
    return proc, url, log


def _stop(proc, log) -> None:
    os.killpg(proc.pid, signal.SIGCONT)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    log.close()


@pytest.fixture(scope="module")
def quiz_server(tmp_path_factory):
    proc, url, log = _serve(tmp_path_factory.mktemp("openenv"))
    try:
        yield url
    finally:
        _stop(proc, log)


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


def test_an_episode_the_environment_failed_is_logged_by_the_rollout():
    from structlog.testing import capture_logs

    engine = TrivialEngine(TrivialEngineConfig(accuracy=1.0))
    with capture_logs() as logs:
        anyio.run(run_episode, engine, _task("http://127.0.0.1:9"), 2, EpisodeSettings(env_timeout_s=10))
    ended = [e for e in logs if e["event"] == "env_episode_ended"]
    assert len(ended) == 1 and ended[0]["episode"] == "t-t1/2" and ended[0]["reason"] == "env_error", logs
    assert ended[0]["environment"] == "openenv" and "reset()" in ended[0]["detail"]


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


def test_a_reset_cancelled_past_its_deadline_gives_its_session_slot_back_without_close(tmp_path):
    """The rollout cancels a call past env_timeout_s, and never calls close() on a thread it abandoned
    as stuck: the slot the reset took must come back anyway, or every later episode waits for it."""
    import asyncio

    from rlvr.rollout.envs.base import EpisodeTask
    from rlvr.rollout.envs.openenv_env import OpenEnvEnvironment, OpenEnvParams
    from rlvr.rollout.envs.runner import EnvThread

    proc, url, log = _serve(tmp_path)
    try:
        params = {"url": url, "action": "text", "observation_field": "question", "max_concurrent": 1}
        OpenEnvEnvironment.load_shared(OpenEnvParams(**params))
        env = OpenEnvEnvironment(OpenEnvParams(**params), EpisodeTask("t-t1", 1, 0, "1+1=", seed=1))
        thread = EnvThread("t-t1/0")
        os.killpg(proc.pid, signal.SIGSTOP)  # silent: the connection waits in the kernel's backlog
        stuck = asyncio.run_coroutine_threadsafe(env.reset(), thread.loop)
        wait_for(lambda: env._slot is not None, timeout_s=10, what="the reset to take the only slot")
        stuck.cancel()
        wait_for(stuck.done, timeout_s=10, what="the cancelled reset to end")
        os.killpg(proc.pid, signal.SIGCONT)
        engine = TrivialEngine(TrivialEngineConfig(accuracy=1.0))
        r = anyio.run(run_episode, engine, _task(url, max_concurrent=1), 0, EpisodeSettings(env_timeout_s=20))
        assert r.episode.end_reason == "done" and r.episode.env_reward == 3.0, r.episode
        thread.stop()
    finally:
        _stop(proc, log)
