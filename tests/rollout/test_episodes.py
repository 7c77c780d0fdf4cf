"""Multi-turn episodes: the model and an environment take turns; every way an episode can end is
recorded, and an environment or tool that fails, hangs or answers garbage never looks like a wrong answer.

The environments are tests/env_fixtures.py, written against the public
interface. The engine is the real trivial engine (it answers the last
arithmetic question in the conversation) or, where the test is about tool
calls, a scripted one that says what a model would (the engine is not what
those tests are about).
"""

from __future__ import annotations

import time

import anyio
import msgspec
import pytest

from rlvr.protocol import SamplingParams, Task, VerifierSpec
from rlvr.protocol.tasks import EnvSpec
from rlvr.rollout.engines.base import Generation, GroupResult, TrivialEngineConfig
from rlvr.rollout.engines.trivial import ByteChatCodec, TrivialEngine
from rlvr.rollout.envs.registry import EnvironmentUnknownError, load_environments
from rlvr.rollout.episodes import EpisodeSettings, check_env_spec, run_episode

FIXTURES = ["QuizEnv", "RaisesEnv", "HangsEnv", "ForksAndHangsEnv", "SpinsEnv", "GarbageEnv", "BadMessagesEnv", "NanRewardEnv",
            "FailsToStartEnv", "ToolBoxEnv"]
load_environments([f"tests.env_fixtures:{name}" for name in FIXTURES])
FAST = EpisodeSettings(env_timeout_s=1.0, tool_timeout_s=0.5)


def _task(env: str, *, params=None, max_turns: int = 8, max_tokens: int = 4096, seed: int = 3) -> Task:
    return Task(run="t", task_id="t-t0", dataset="d", index=0, prompt="Answer each sum.",
                verifier=VerifierSpec("env"), n=2, sampling=SamplingParams(max_tokens=8, seed=seed), policy_version=0,
                created_at=time.time(),
                env=EnvSpec(f"tests.env_fixtures:{env}", params or {}, max_turns=max_turns, max_tokens=max_tokens))


def _run(engine, task, settings=FAST):
    async def main():
        return await run_episode(engine, task, 0, settings)

    return anyio.run(main)


def test_an_episode_runs_to_done_with_every_turn_recorded_and_the_environment_s_tokens_masked():
    engine = TrivialEngine(TrivialEngineConfig(accuracy=1.0))
    r = _run(engine, _task("QuizEnv", params={"questions": 3}))
    e = r.episode
    assert e.end_reason == "done" and len(e.turns) == 3 and e.turn_rewards == [1.0, 1.0, 1.0] and e.env_reward == 3.0
    c = r.completion
    assert len(c.ids) == len(c.logprobs) == len(c.mask) and 0 < sum(c.mask) < len(c.mask)
    for turn in e.turns:  # each turn's tokens are the policy's, the rest the environment's
        assert all(c.mask[turn.start:turn.end]) and turn.policy_version == 0
    assert all(lp == 0.0 for lp, m in zip(c.logprobs, c.mask) if not m)
    codec = ByteChatCodec()
    masked = codec.decode([i for i, m in zip(c.ids, c.mask) if not m])
    assert masked.count("user: ") == 2  # the second and third questions, as the template's delta
    assert r.text == e.transcript[-1][1] and [role for role, _ in e.transcript].count("assistant") == 3


def test_max_turns_and_the_token_budget_end_an_episode_saying_which():
    engine = TrivialEngine(TrivialEngineConfig(accuracy=1.0))
    assert _run(engine, _task("QuizEnv", params={"questions": 9}, max_turns=2)).episode.end_reason == "max_turns"
    r = _run(engine, _task("QuizEnv", params={"questions": 9}, max_tokens=30))
    # No turn starts past the budget, and none is given more tokens than are left.
    assert r.episode.end_reason == "token_budget" and all(t.start < 30 and t.end <= 30 for t in r.episode.turns)


@pytest.mark.parametrize("env, reason, says", [
    ("RaisesEnv", "env_error", "RuntimeError: the environment's server is down"),
    ("HangsEnv", "env_timeout", "did not return within 1s"),
    ("SpinsEnv", "env_timeout", "did not return within 1s"),
    ("GarbageEnv", "env_error", "not a StepResult"),
    ("BadMessagesEnv", "env_error", "is not {role: user|tool|system"),
    ("NanRewardEnv", "env_error", "reward of nan"),
    ("FailsToStartEnv", "env_error", "ConnectionError: cannot reach the environment server"),
])
def test_an_environment_that_fails_hangs_or_answers_garbage_ends_the_episode_saying_so(env, reason, says):
    engine = TrivialEngine(TrivialEngineConfig(accuracy=1.0))
    started = time.monotonic()
    r = _run(engine, _task(env))
    assert r.episode.end_reason == reason and says in r.episode.detail, r.episode
    assert r.finish_reason == "abort" and time.monotonic() - started < 10  # bounded, even for a loop that never yields


def test_what_a_hung_step_started_is_killed_and_what_others_started_is_not(tmp_path):
    import os
    import subprocess
    import sys

    from rlvr.rollout.envs import spawns

    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])  # the rollout's own
    try:
        # Started apart from the step's program: two starts within spawns.WINDOW_S are ambiguous, and
        # an ambiguous process is left alone (a wrong kill is worse than a leftover).
        from tests.conftest import wait_for

        wait_for(lambda: spawns.now() - spawns._started(bystander.pid) > spawns.WINDOW_S[1], timeout_s=10,
                 what="the bystander to be older than the attribution window")
        engine = TrivialEngine(TrivialEngineConfig(accuracy=1.0))
        r = _run(engine, _task("ForksAndHangsEnv", params={"pid_dir": str(tmp_path)}))
        assert r.episode.end_reason == "env_timeout", r.episode
        # The step's program noted itself and its own child before the episode was given up on
        # (it had 2 s: the 1 s deadline, then the 1 s ping the stuck thread does not answer).
        pids = sorted(int(p.name) for p in tmp_path.iterdir())
        assert len(pids) == 2, pids

        def alive():
            return [p for p in pids if os.path.exists(f"/proc/{p}") and "Z" not in _state(p)]

        # SIGKILL is delivered when the target next runs: on a busy machine the grandchild (killed,
        # not waited for) can show as running for a moment after the episode ended. Left alone, it
        # would sleep for 300 s.
        wait_for(lambda: alive() == [], timeout_s=20, what="the step's processes to die")
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_a_process_two_owners_could_have_started_is_left_alone():
    import contextvars
    import subprocess
    import sys

    from rlvr.rollout.envs import spawns

    spawns.install()
    since = spawns.now()
    a, b = object(), object()

    def start(owner):
        spawns.own(owner)
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])

    procs = [contextvars.copy_context().run(start, a), contextvars.copy_context().run(start, b)]
    try:
        assert spawns.started_by(a, since) == [] and spawns.started_by(b, since) == []
        assert all(p.poll() is None for p in procs)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_processes_hung_episodes_started_together_are_killed_once_each_of_them_is_reaped():
    """A task's episodes hang in the same step together: each one's processes are ambiguous while
    another of them still runs, and killed when the last of them is given up on (reaped)."""
    import contextvars
    import os
    import subprocess
    import sys

    from rlvr.rollout.envs import spawns

    from tests.conftest import wait_for

    spawns.install()
    # Past the window of any process an earlier test started (a note of a running owner, ambiguous).
    wait_for(lambda: spawns.now() - max((t for t, _ in spawns._notes), default=0.0) > 2 * spawns.WINDOW_S[1],
             timeout_s=10, what="earlier process starts to leave the attribution window")
    since = spawns.now()

    class Owner:  # an episode's EnvThread, as far as spawns is concerned
        pass

    a, b = Owner(), Owner()

    def start(owner):
        spawns.own(owner)
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])

    procs = [contextvars.copy_context().run(start, a), contextvars.copy_context().run(start, b)]
    try:
        assert spawns.reap(a, since, "t-t0/0") == 0  # b still runs: either process may be b's
        assert all(p.poll() is None for p in procs)
        assert spawns.reap(b, since, "t-t0/1") == 2
        assert all(_state(p.pid) == "Z" or not os.path.exists(f"/proc/{p.pid}") for p in procs)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_an_unknown_environment_or_bad_params_are_refused_before_any_episode():
    with pytest.raises(EnvironmentUnknownError, match="list it in \\[rollout\\] environments"):
        check_env_spec(EnvSpec("somewhere.else:Env"))
    with pytest.raises(ValueError, match="bad params for environment QuizEnv"):
        check_env_spec(EnvSpec("tests.env_fixtures:QuizEnv", {"questions": "three"}))


class ScriptedEngine:
    """Says the given turns in order, as a model would; tokens are utf-8 bytes."""

    def __init__(self, turns: list[str]) -> None:
        self.turns, self.weights_version, self.prompts = list(turns), 0, []

    def chat_codec(self):
        return ByteChatCodec()

    async def generate_ids(self, prompt_ids, n, sampling):
        self.prompts.append(bytes(prompt_ids).decode())
        text = self.turns.pop(0)
        ids = list(text.encode())
        return GroupResult(list(prompt_ids), [Generation(ids, [-0.5] * len(ids), text, "stop")], 0, 0)


def test_tool_calls_are_run_and_answered_and_failures_are_told_to_the_model_and_counted():
    calls = [
        '<tool_call>{"name": "calculator", "arguments": {"expression": "37*8"}}</tool_call>',
        '<tool_call>{"name": "broken", "arguments": {"x": "y"}}</tool_call>'
        '<tool_call>{"name": "nope", "arguments": {}}</tool_call><tool_call>{not json}</tool_call>',
        '<tool_call>{"name": "hangs", "arguments": {"x": "y"}}</tool_call>'
        '<tool_call>{"name": "slow", "arguments": {"seconds": 5}}</tool_call>',
        "296",
    ]
    engine = ScriptedEngine(calls)
    started = time.monotonic()
    r = _run(engine, _task("ToolBoxEnv"))
    e = r.episode
    assert e.end_reason == "done" and e.env_reward == 1.0 and r.text == "296"
    assert e.tool_calls == {"calculator": 1, "broken": 1, "nope": 1, "hangs": 1, "slow": 1}
    assert e.tool_errors == {"broken": 1, "nope": 1, "unparsed": 1, "hangs": 1, "slow": 1}
    told = engine.prompts[-1]  # everything the model read before its last turn
    assert "tool: 296" in told
    assert "error: ValueError: cannot handle 'y'" in told and "error: unknown tool 'nope'" in told
    assert "a tool call that is not JSON" in told and "hangs timed out after 0.5s" in told
    assert time.monotonic() - started < 15
    # The offered tools reached the prompt through the template's tools= (the byte codec ignores them;
    # a real template lists them: tests/rollout/test_transcript.py).


def test_the_python_tool_runs_model_written_code_in_the_sandbox_not_in_the_rollout():
    from rlvr.rollout.builtin_tools import use_sandbox
    from rlvr.sandbox.config import SandboxConfig

    use_sandbox(SandboxConfig())
    code = "import os; print(6 * 7, os.getpid() != %d)" % __import__("os").getpid()
    engine = ScriptedEngine([
        '<tool_call>{"name": "python", "arguments": {"code": "%s"}}</tool_call>' % code.replace('"', '\\"'),
        "42",
    ])
    task = msgspec.structs.replace(_task("QuizEnv"), env=EnvSpec("tools", {"tools": ["python", "calculator"]}))
    r = _run(engine, task, EpisodeSettings(env_timeout_s=30, tool_timeout_s=30))
    assert r.episode.end_reason == "done" and r.episode.tool_calls == {"python": 1}
    assert "tool: 42 True" in engine.prompts[-1]  # run in another process, and its answer shown
