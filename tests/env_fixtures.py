"""Environments for the episode tests, written against the public interface only
(``rlvr.rollout.envs.base``), as a user would. Plug-in paths: ``tests.env_fixtures:NAME``."""

from __future__ import annotations

import asyncio
import random
import threading
import time

from msgspec import Struct

from rlvr.rollout.envs.base import AssistantTurn, Environment, EpisodeTask, StepResult, user
from rlvr.rollout.tools import tool


class QuizParams(Struct, frozen=True):
    questions: int = 3


class QuizEnv(Environment):
    """Asks arithmetic questions one after another; 1 per right answer, done after the last."""

    Params = QuizParams

    def __init__(self, params: QuizParams, task: EpisodeTask) -> None:
        super().__init__(params, task)
        rng = random.Random(task.seed)
        self.questions = [(rng.randint(1, 9), rng.randint(1, 9)) for _ in range(params.questions)]
        self.asked = 0

    async def reset(self):
        a, b = self.questions[0]
        return [user(f"{a}+{b}=")]

    async def step(self, turn: AssistantTurn) -> StepResult:
        a, b = self.questions[self.asked]
        reward = 1.0 if turn.text.strip() == str(a + b) else 0.0
        self.asked += 1
        if self.asked == len(self.questions):
            return StepResult(reward=reward, done=True, info={"asked": self.asked})
        a, b = self.questions[self.asked]
        return StepResult(messages=[user(f"{a}+{b}=")], reward=reward)


class RaisesEnv(QuizEnv):
    async def step(self, turn):
        raise RuntimeError("the environment's server is down")


class HangsEnv(QuizEnv):
    async def step(self, turn):
        await asyncio.sleep(3600)


_NEVER = threading.Event()  # never set: what a hung tool waits on


class ForksAndHangsParams(Struct, frozen=True):
    pid_dir: str = ""
    questions: int = 3


class ForksAndHangsEnv(QuizEnv):
    """A step that starts a program (which starts one of its own) and then blocks its thread waiting
    for it, never yielding: a user's tool wrapper that hangs. The program notes its own pid and its
    child's in ``pid_dir``."""

    Params = ForksAndHangsParams

    async def step(self, turn):
        import subprocess

        # A shell, not a Python program: it notes both pids within milliseconds even on a loaded
        # machine, where a Python interpreter can take longer to start than the step's deadline.
        child = 'sleep 300 & touch "$0/$$" "$0/$!"; wait'
        subprocess.Popen(["sh", "-c", child, self.params.pid_dir])
        _NEVER.wait(4)  # blocks the thread past env_timeout_s, never yielding: the rollout gives up on it
        return StepResult(reward=0.0, done=True)


class SpinsEnv(QuizEnv):
    """Never yields: a sync loop in an async method (a user's bug)."""

    async def step(self, turn):
        while True:
            time.sleep(0.01)


class GarbageEnv(QuizEnv):
    async def step(self, turn):
        return {"messages": "not a StepResult"}


class BadMessagesEnv(QuizEnv):
    async def step(self, turn):
        return StepResult(messages=[{"role": "robot", "content": 5}])


class NanRewardEnv(QuizEnv):
    async def step(self, turn):
        return StepResult(reward=float("nan"), done=True)


class FailsToStartEnv(QuizEnv):
    def __init__(self, params, task):
        raise ConnectionError("cannot reach the environment server")


@tool
def slow(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "done"


@tool
def broken(x: str) -> str:
    """Always fails."""
    raise ValueError(f"cannot handle {x!r}")


@tool
async def hangs(x: str) -> str:
    """Never answers."""
    await asyncio.sleep(3600)
    return x


class ToolBoxEnv(Environment):
    """Offers a few tools; the first turn without a call is the answer."""

    def __init__(self, params, task) -> None:
        super().__init__(params, task)
        from rlvr.rollout.builtin_tools import calculator

        self.tools = [calculator, slow, broken, hangs]

    async def step(self, turn: AssistantTurn) -> StepResult:
        return StepResult(reward=1.0 if turn.text.strip() == "296" else 0.0, done=True)
