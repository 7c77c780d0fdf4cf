"""The chaos run's multi-turn episodes: an environment written against the public interface.

Each task's episode asks 1 + (task index mod 3) sums, one per turn, so the
run mixes one-turn and multi-turn episodes; the trivial engine answers them.
The reward (the ``env`` verifier) is the share of right answers. A rollout
killed mid-episode has its task redelivered and the episode generated again:
the checks are the same as for single completions (nothing lost, nothing
trained twice).

The environment faults (``faults.environment_fault``) are switched from outside: while
``$RLVR_RUN_DIR/chaos-env`` says ``raise``, every step raises (the episode ends ``env_error``,
its sample is dropped as ``verify_failed``); while it says ``hang``, a step forks a child and
blocks its thread for ``HANG_S`` (past the rollout's ``env_timeout_s``: ``env_timeout``).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

from rlvr.rollout.envs.base import AssistantTurn, Environment, EpisodeTask, StepResult, user

HANG_S = 20.0
CHILD_TAG = "chaos-env-child"  # in the forked child's argv, so the fault can find what outlived it


def chaos_mode() -> str:
    try:
        return (Path(os.environ.get("RLVR_RUN_DIR", ".")) / "chaos-env").read_text().strip()
    except OSError:
        return ""


class Quiz(Environment):
    def __init__(self, params, task: EpisodeTask) -> None:
        super().__init__(params, task)
        rng = random.Random(task.seed)
        self.sums = [(rng.randint(1, 50), rng.randint(1, 50)) for _ in range(1 + task.index % 3)]
        self.asked = 0
        self.right = 0

    async def reset(self):
        return [user(self._question())]

    def _question(self) -> str:
        a, b = self.sums[self.asked]
        return f"{a}+{b}="

    async def step(self, turn: AssistantTurn) -> StepResult:
        mode = chaos_mode()
        if mode == "raise":
            raise RuntimeError("chaos: the environment raised")
        if mode == "hang":  # a tool that forks a child and hangs its thread
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", CHILD_TAG])
            time.sleep(HANG_S)
        a, b = self.sums[self.asked]
        self.right += turn.text.strip() == str(a + b)
        self.asked += 1
        if self.asked == len(self.sums):
            return StepResult(reward=self.right / len(self.sums), done=True)
        return StepResult(messages=[user(self._question())])
