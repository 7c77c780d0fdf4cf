"""The envs scenario's episodes: a real ``verifiers`` environment, and the plug-in that sends each task
either to a real OpenEnv server or to that environment, through the rollout's own adapters.

A run has one dataset and one environment per task, so the learner's tasks all name ``Mixed``
(``bench.chaos.env_episodes:Mixed``, listed in the rollout's ``environments``). It makes no episode
of its own: a task with an even task number is played by the built-in OpenEnv adapter
(``rlvr.rollout.envs.openenv_env``) against the quiz server (``tests/openenv_quiz_server.py``, served
by uvicorn: three sums per session), one with an odd number by the built-in verifiers adapter
(``rlvr.rollout.envs.verifiers_env``) with ``Sums`` below, loaded by ``verifiers.load_environment``
(``env_id = "bench.chaos.env_episodes"``). Both ask sums, so the trivial engine plays them.

``Sums`` (verifiers' classic ``MultiTurnEnv``): the task's prompt is the first sum; its
``env_response`` checks the model's answer and asks another, 1 + (example id mod 3) in all, then
ends with ``final_env_response``; its rubric scores the share of right answers. The faults switch
it from outside, through ``$RLVR_RUN_DIR/chaos-envs``:

- ``raise``: every ``env_response`` raises (the episode ends ``env_error``);
- ``hang``: an ``env_response`` starts ``CHILDREN`` processes, each of which starts one of its own,
  then blocks its thread for ``HANG_S`` (past the rollout's ``env_timeout_s``: ``env_timeout``; the
  rollout must kill what it started, ``rlvr.rollout.envs.spawns``). Their argv carries ``CHILD_TAG``
  and the run directory, so the fault finds any that outlived the episode.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct

from rlvr.rollout.envs.base import AssistantTurn, Environment, EpisodeTask, StepResult

HANG_S = 15.0
CHILDREN = 2
CHILD_TAG = "chaos-envs-child"
FLAG = "chaos-envs"
_SUM = re.compile(r"(-?\d+)\s*([-+*])\s*(-?\d+)\s*=")


def chaos_mode() -> str:
    try:
        return (Path(os.environ.get("RLVR_RUN_DIR", ".")) / FLAG).read_text().strip()
    except OSError:
        return ""


def kind_of(task_id: str) -> str:
    """Which environment plays a task: ``openenv`` (even task number) or ``verifiers`` (odd)."""
    tail = task_id.rsplit("-t", 1)[-1]
    return "openenv" if tail.isdigit() and int(tail) % 2 == 0 else "verifiers"


# --- the verifiers environment -----------------------------------------------------------------
def _content(m: Any) -> tuple[str, str]:
    role = m["role"] if isinstance(m, dict) else getattr(m, "role", "")
    content = m["content"] if isinstance(m, dict) else getattr(m, "content", "")
    return str(role), content if isinstance(content, str) else str(content or "")


def _value(a: str, op: str, b: str) -> int:
    x, y = int(a), int(b)
    return x + y if op == "+" else x - y if op == "-" else x * y


def _hang() -> None:
    """A tool that forks and hangs: children (each with a child of its own), then a blocked thread."""
    run_dir = os.environ.get("RLVR_RUN_DIR", ".")
    inner = "import time; time.sleep(120)"
    outer = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {inner!r}, {CHILD_TAG!r}, "
             f"{run_dir!r}]); time.sleep(120)")
    for _ in range(CHILDREN):
        subprocess.Popen([sys.executable, "-c", outer, CHILD_TAG, run_dir])
    time.sleep(HANG_S)


def load_environment(**kwargs: Any) -> Any:
    """``verifiers.load_environment("bench.chaos.env_episodes")``."""
    import verifiers as vf
    from datasets import Dataset

    class Sums(vf.MultiTurnEnv):
        async def setup_state(self, state):
            state["asked"], state["right"] = 0, 0
            state["questions"] = 1 + int(state.get("example_id") or 0) % 3
            return state

        async def env_response(self, messages, state, **kw):
            mode = chaos_mode()
            if mode == "raise":
                raise RuntimeError("chaos: the verifiers environment raised")
            if mode == "hang":
                _hang()
            said = [_content(m) for m in messages]
            answer = next((c for r, c in reversed(said) if r == "assistant"), "")
            asked = [m for r, c in said if r == "user" for m in _SUM.findall(c)]
            state["asked"] += 1
            state["right"] += bool(asked) and answer.strip() == str(_value(*asked[-1]))
            if state["asked"] >= state["questions"]:
                state["final_env_response"] = [vf.UserMessage(content="done")]
                return state["final_env_response"]
            rng = random.Random(f"{state.get('example_id')}/{state['asked']}")
            return [vf.UserMessage(content=f"{rng.randint(1, 50)}+{rng.randint(1, 50)}=")]

    def share_right(state, **kw) -> float:
        return state.get("right", 0) / max(1, state.get("asked", 0))

    rows = [{"question": "1+1=", "answer": "2"}]  # unused: the learner's dataset makes the tasks
    return Sums(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[share_right]), max_turns=8, **kwargs)


# --- the plug-in ---------------------------------------------------------------------------------
class MixedParams(Struct, frozen=True, forbid_unknown_fields=True):
    openenv: dict[str, Any]  # OpenEnvParams
    verifiers: dict[str, Any]  # VerifiersParams


class Mixed(Environment):
    Params = MixedParams

    @classmethod
    def load_shared(cls, params: MixedParams) -> None:
        from rlvr.rollout.envs.openenv_env import OpenEnvEnvironment, OpenEnvParams
        from rlvr.rollout.envs.verifiers_env import VerifiersEnvironment, VerifiersParams

        OpenEnvEnvironment.load_shared(msgspec.convert(params.openenv, OpenEnvParams))
        VerifiersEnvironment.load_shared(msgspec.convert(params.verifiers, VerifiersParams))

    def __init__(self, params: MixedParams, task: EpisodeTask) -> None:
        super().__init__(params, task)
        if kind_of(task.task_id) == "openenv":
            from rlvr.rollout.envs.openenv_env import OpenEnvEnvironment, OpenEnvParams

            self.inner: Environment = OpenEnvEnvironment(msgspec.convert(params.openenv, OpenEnvParams), task)
        else:
            from rlvr.rollout.envs.verifiers_env import VerifiersEnvironment, VerifiersParams

            self.inner = VerifiersEnvironment(msgspec.convert(params.verifiers, VerifiersParams), task)
        self.tools = self.inner.tools

    async def reset(self):
        return await self.inner.reset()

    async def step(self, turn: AssistantTurn) -> StepResult:
        return await self.inner.step(turn)

    async def close(self) -> None:
        await self.inner.close()


def _selftest() -> None:  # python -m bench.chaos.env_episodes URL: a few episodes of each kind, no bus
    import anyio

    from rlvr.protocol import SamplingParams, Task, VerifierSpec
    from rlvr.protocol.tasks import EnvSpec
    from rlvr.rollout.engines.base import TrivialEngineConfig
    from rlvr.rollout.engines.trivial import TrivialEngine
    from rlvr.rollout.envs.registry import load_environments
    from rlvr.rollout.episodes import EpisodeSettings, run_episode

    load_environments(["bench.chaos.env_episodes:Mixed"])
    params = {"openenv": {"url": sys.argv[1], "action": "text", "observation_field": "question"},
              "verifiers": {"env_id": "bench.chaos.env_episodes"}}
    for n in (2, 3, 5):
        task = Task(run="t", task_id=f"t-t{n}", dataset="d", index=n, prompt="12+7=", verifier=VerifierSpec("env"),
                    n=1, sampling=SamplingParams(max_tokens=8, seed=1), policy_version=0, created_at=time.time(),
                    env=EnvSpec("bench.chaos.env_episodes:Mixed", params, max_turns=4))
        e = anyio.run(run_episode, TrivialEngine(TrivialEngineConfig(accuracy=1.0)), task, 0,
                      EpisodeSettings(env_timeout_s=10)).episode
        print(kind_of(task.task_id), e.end_reason, e.env_reward, e.detail[:200], e.transcript)


if __name__ == "__main__":
    _selftest()
