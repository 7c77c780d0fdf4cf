"""A ``verifiers`` environment (tests/vf_guess_env.py, verifiers' classic API) driven by our rollout:
its dataset becomes the tasks, its env_response answers our model's turns, its rubric scores the episode."""

from __future__ import annotations

import re
import time

import anyio
import pytest

pytest.importorskip("verifiers", reason="the verifiers adapter's tests need verifiers (pip install 'rlvr-actor[env]')")

from rlvr.learner.data.dataset_config import VerifiersDataset  # noqa: E402
from rlvr.learner.data.datasets import load_splits  # noqa: E402
from rlvr.protocol import SamplingParams, Task  # noqa: E402
from rlvr.rollout.episodes import EpisodeSettings, check_env_spec, run_episode  # noqa: E402
from tests.rollout.test_episodes import ScriptedEngine  # noqa: E402


def _tasks(**kw):
    return load_splits(VerifiersDataset(env_id="tests.vf_guess_env", max_turns=6, **kw), seed=0).train


def _task(spec) -> Task:
    return spec.to_task(run="t", task_id=f"t-vf{spec.index}", n=1, sampling=SamplingParams(max_tokens=16),
                        policy_version=0)


class BinarySearch(ScriptedEngine):
    """Guesses by halving, from the feedback it reads: what a good policy would say."""

    def __init__(self, first: list[str] | None = None) -> None:
        super().__init__(first or [])

    async def generate_ids(self, prompt_ids, n, sampling):
        if not self.turns:
            text = bytes(prompt_ids).decode()
            lo, hi = 1, 10
            for guess, said in re.findall(r"<guess>(\d+)</guess>\nuser: (\w+)", text):
                if said == "higher":
                    lo = int(guess) + 1
                elif said == "lower":
                    hi = int(guess) - 1
            self.turns = [f"<guess>{(lo + hi) // 2}</guess>"]
        return await super().generate_ids(prompt_ids, n, sampling)


def test_the_environment_s_dataset_becomes_tasks_that_name_it():
    specs = _tasks()
    assert len(specs) == 4 and specs[0].prompt[0].role == "system" and "guessing game" in specs[0].prompt[0].content
    assert specs[0].record["answer"] == "7" and specs[0].env.name == "verifiers"
    check_env_spec(specs[0].env)


def test_episodes_run_the_environment_s_loop_and_its_rubric_scores_them():
    started = time.monotonic()
    for spec in _tasks():
        engine = BinarySearch()
        r = anyio.run(run_episode, engine, _task(spec), 0, EpisodeSettings(env_timeout_s=30))
        e = r.episode
        guesses = [int(g) for g in re.findall(r"<guess>(\d+)</guess>", " ".join(t for _, t in e.transcript))]
        assert guesses[-1] == int(spec.record["answer"]) and e.end_reason == "done", e
        # The rubric's score: solved (1.0) + 0.5 x 1/guesses.
        assert e.env_reward == pytest.approx(1.0 + 0.5 / len(guesses))
        assert [role for role, _ in e.transcript if role == "user"][1:] != []  # its env_response answered
    assert time.monotonic() - started < 30


def test_a_sandboxed_python_tool_is_offered_next_to_the_environment():
    from rlvr.rollout.builtin_tools import use_sandbox
    from rlvr.sandbox.config import SandboxConfig

    use_sandbox(SandboxConfig())
    spec = _tasks(tools=("python",))[0]  # the answer is 7
    engine = BinarySearch(['<tool_call>{"name": "python", "arguments": {"code": "print(3 + 4)"}}</tool_call>',
                           "<guess>7</guess>"])
    r = anyio.run(run_episode, engine, _task(spec), 0, EpisodeSettings(env_timeout_s=30, tool_timeout_s=30))
    assert r.episode.tool_calls == {"python": 1} and "tool: 7" in engine.prompts[1]
    assert r.episode.end_reason == "done" and r.episode.env_reward == pytest.approx(1.5)


def test_an_environment_with_its_own_unsandboxed_tools_is_refused(monkeypatch):
    import verifiers as vf

    import tests.vf_guess_env as m
    from rlvr.rollout.envs.verifiers_env import load_vf_environment

    monkeypatch.setattr(vf, "load_environment", lambda env_id, **kw: m.load_tool_environment())
    with pytest.raises(ValueError, match="would run unsandboxed"):
        load_vf_environment("tests.vf_guess_env", {"variant": "tools"})


def test_loading_an_environment_leaves_the_role_s_own_signal_handlers_in_place():
    """verifiers' Environment installs a SIGTERM handler that exits 143 (and a SIGINT one): a rollout
    or learner that loads one must still stop gracefully on SIGTERM."""
    import signal

    from rlvr.learner.data.dataset_vf import verifiers_specs
    from rlvr.rollout.envs.verifiers_env import load_vf_environment

    def ours(signum, frame):
        return None

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        signal.signal(signal.SIGTERM, ours)
        signal.signal(signal.SIGINT, ours)
        load_vf_environment("tests.vf_guess_env", {"max_turns": 5})  # a new env_args: not the cached one
        assert signal.getsignal(signal.SIGTERM) is ours and signal.getsignal(signal.SIGINT) is ours
        verifiers_specs(VerifiersDataset(env_id="tests.vf_guess_env", max_turns=5))
        assert signal.getsignal(signal.SIGTERM) is ours and signal.getsignal(signal.SIGINT) is ours
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
