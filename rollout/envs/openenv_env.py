"""The ``openenv`` environment: an episode played against an OpenEnv server (``openenv-core``).

``env = {name = "openenv", params = {url = "http://127.0.0.1:8000", ...}}``.
Each episode opens its own WebSocket session on the server (OpenEnv's
``GenericEnvClient``: its HTTP ``/reset`` and ``/step`` endpoints make a fresh
environment per request, so a multi-step episode needs the session), calls
``reset`` (with the episode's seed) and then one ``step`` per assistant turn:

- the action is the turn as JSON (``action = "json"``: the model writes the
  action object, e.g. ``{"guess": 5}``), or ``{text_field: turn text}``
  (``action = "text"``);
- the model reads each observation as a user message: ``observation_field``
  of it, or the whole observation as JSON;
- the server's reward and ``done`` are the step's.

At most ``max_concurrent`` episodes talk to one server at a time (a server
holds one environment per session; TRL warns that an unbounded number of
sessions overruns it): the others wait for a slot, within ``env_timeout_s``.
An action that is not JSON, or that the server refuses (OpenEnv's error
reply), is the model's mistake: it is told so, and the turn earns nothing. A
connection that fails and a message that times out are the environment's:
the episode ends as ``env_error`` / ``env_timeout``, never as a reward of 0.
Tested against ``openenv-core==0.3.0``.
"""

from __future__ import annotations

import json
import threading
from typing import Any, ClassVar, Literal

from msgspec import Struct

from rlvr.rollout.builtin_tools import builtin_tools
from rlvr.rollout.envs.base import AssistantTurn, Environment, EpisodeTask, StepResult, user


class OpenEnvParams(Struct, frozen=True, forbid_unknown_fields=True):
    # The OpenEnv server's base URL (http://host:port; its WebSocket is /ws).
    url: str
    # "json": the assistant turn is the action object; "text": {text_field: turn}.
    action: Literal["json", "text"] = "json"
    # The action's field that holds the turn's text (action = "text").
    text_field: str = "message"
    # The observation's field the model reads (None: the whole observation as JSON).
    observation_field: str | None = None
    # Extra keyword arguments of the server's reset (the episode's seed is passed as seed).
    reset_kwargs: dict[str, Any] = {}
    # Episodes in session with one server at once; the others wait.
    max_concurrent: int = 8
    # Seconds the client waits for the server's answer to one message.
    message_timeout_s: float = 60.0
    # Built-in tools offered next to the environment ("python", "calculator").
    tools: tuple[str, ...] = ()


class OpenEnvEnvironment(Environment):
    Params = OpenEnvParams
    _slots: ClassVar[dict[tuple[str, int], threading.BoundedSemaphore]] = {}
    _slots_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, params: OpenEnvParams, task: EpisodeTask) -> None:
        super().__init__(params, task)
        available = builtin_tools()
        self.tools = [available[t] for t in params.tools]
        self.client: Any = None
        self._slot: threading.BoundedSemaphore | None = None

    def _semaphore(self) -> threading.BoundedSemaphore:
        key = (self.params.url, self.params.max_concurrent)
        with self._slots_lock:
            if key not in self._slots:
                self._slots[key] = threading.BoundedSemaphore(self.params.max_concurrent)
            return self._slots[key]

    @classmethod
    def load_shared(cls, params: OpenEnvParams) -> None:
        # Seconds on a loaded machine (fastapi, pydantic ...): once, here, not inside the first
        # episodes' env_timeout_s, where it would time every one of them out.
        import openenv.core  # noqa: F401

    async def reset(self) -> list[dict[str, Any]]:
        import asyncio

        from openenv.core import GenericEnvClient

        slot = self._semaphore()
        # This episode's thread is its own (rlvr.rollout.envs.runner): blocking it only waits this episode.
        while not slot.acquire(timeout=0.05):
            await asyncio.sleep(0)
        self._slot = slot
        try:
            self.client = GenericEnvClient(base_url=self.params.url, message_timeout_s=self.params.message_timeout_s)
            await self.client.connect()
            result = await self.client.reset(seed=self.task.seed, **self.params.reset_kwargs)
        except BaseException:
            # Failed, or cancelled past env_timeout_s: the slot goes back now, for close() may never
            # come (a thread the rollout abandoned as stuck gets none), and a slot kept is one
            # session fewer for every later episode, for good.
            self._release()
            raise
        return [user(self._show(result.observation))]

    async def step(self, turn: AssistantTurn) -> StepResult:
        try:
            action = self._action(turn.text)
        except ValueError as e:  # the model's mistake: it is told, and the turn earns nothing
            return StepResult(messages=[user(f"error: {e}")])
        try:
            result = await self.client.step(action)
        except RuntimeError as e:  # the server refused this action (OpenEnv's error reply): the model's to fix
            return StepResult(messages=[user(f"error: the environment refused the action: {e}")])
        reward = result.reward if result.reward is not None else 0.0
        messages = [] if result.done else [user(self._show(result.observation))]
        return StepResult(messages=messages, reward=float(reward), done=bool(result.done))

    async def close(self) -> None:
        try:
            if self.client is not None:
                await self.client.close()
        finally:
            self._release()

    def _release(self) -> None:
        if self._slot is not None:
            self._slot.release()
            self._slot = None

    def _action(self, text: str) -> dict[str, Any]:
        if self.params.action == "text":
            return {self.params.text_field: text}
        try:
            action = json.loads(text.strip().removeprefix("```json").removeprefix("```").removesuffix("```"))
        except ValueError as e:
            raise ValueError(f"the turn is not a JSON action ({e}): {text[:200]!r}") from None
        if not isinstance(action, dict):
            raise ValueError(f"the turn is not a JSON object: {text[:200]!r}")
        return action

    def _show(self, observation: Any) -> str:
        if self.params.observation_field is not None and isinstance(observation, dict):
            value = observation.get(self.params.observation_field, observation)
            return value if isinstance(value, str) else json.dumps(value)
        return observation if isinstance(observation, str) else json.dumps(observation, default=str)


__all__ = ["OpenEnvEnvironment", "OpenEnvParams"]
