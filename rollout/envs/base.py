"""The environment interface: what a user implements to make a task multi-turn (docs/environments.md).

An environment is a subclass of ``Environment``, made fresh for each episode
with its typed parameters and the task::

    class Guess(Environment):
        class Params(Struct):
            low: int = 0
            high: int = 99

        def __init__(self, params: Params, task: EpisodeTask) -> None:
            self.secret = random.Random(task.seed).randint(params.low, params.high)

        async def step(self, turn: AssistantTurn) -> StepResult:
            guess = int(turn.text)
            if guess == self.secret:
                return StepResult(reward=1.0, done=True)
            return StepResult(messages=[user("higher" if guess < self.secret else "lower")])

The rollout calls ``reset()`` once (its messages follow the task's prompt,
before the first turn), then ``step(turn)`` after every assistant turn that
calls no tool, until a step says ``done``, the task's ``max_turns`` or its
token budget runs out. Both are async and run under the rollout's
``env_timeout_s``; an exception or a timeout ends the episode as
``env_error`` / ``env_timeout``, which the verifier reports as outcome
``error``, never as a reward of 0. ``close()`` is always called.

Tools: an environment that offers ``tools`` (``rlvr.rollout.tools.Tool``)
gets them into the chat template's ``tools=`` argument; when the model's turn
calls them, the rollout runs them (each under ``tool_timeout_s``) and answers
with their results, and ``step`` sees only the turns that call none.

A message is a dict ``{"role": "user" | "tool" | "system", "content": str}``
(``name`` for a tool's reply): ``user(text)`` and ``tool_reply(name, text)``
make them. Rewards: each step's ``reward`` is the environment's reward for
that step; their sum is the episode's environment reward (``Episode.env_reward``),
which the ``env`` verifier (or a ``composite`` with an ``env`` part) turns into
the reward the learner trains on.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
from msgspec import Struct

from rlvr.protocol.tasks import ChatMessage
from rlvr.rollout.tools import Tool, ToolCall

Message = dict[str, Any]


class NoParams(Struct, frozen=True, forbid_unknown_fields=True):
    pass


class EpisodeTask(Struct, frozen=True):
    """What an environment knows about the episode it serves."""

    task_id: str
    index: int  # the dataset record
    episode: int  # which of the task's n episodes (its sample index)
    prompt: str | list[ChatMessage]
    record: dict[str, Any] = {}
    dataset: str = ""
    # A seed for the environment's own choices: the same for a task's n episodes
    # (GRPO compares them on the same problem), different across tasks.
    seed: int = 0


class AssistantTurn(Struct, frozen=True):
    text: str
    index: int  # 0 for the first turn
    tool_calls: list[ToolCall] = []
    finish_reason: str = "stop"  # "length": cut by the turn's token limit


class StepResult(Struct, frozen=True):
    # Messages the model reads next (none when done).
    messages: list[Message] = []
    # The environment's reward for this step (added up over the episode).
    reward: float = 0.0
    done: bool = False
    # Anything worth keeping in the episode's record (``Episode.info``, one dict per turn: what
    # `rlvr-actor samples` shows); plain JSON, trimmed past MAX_INFO_BYTES; never trained on.
    info: dict[str, Any] = {}


def recorded_info(info: Any) -> dict[str, Any]:
    """``StepResult.info`` as the episode records it: plain JSON (anything else as its ``repr``),
    nested at most 16 deep and at most ``MAX_INFO_BYTES`` of it; past that, the start of its JSON
    under ``"truncated"``. Never raises: an environment's careless info costs it its info only."""
    from rlvr.protocol.samples import MAX_INFO_BYTES

    if not info:
        return {}
    try:
        raw = msgspec.json.encode(info if isinstance(info, dict) else {"info": info}, enc_hook=repr)
        out = msgspec.json.decode(raw)
    except Exception as e:  # non-string keys, a repr that raises, nesting past the encoder's limit
        return {"unrecordable": f"{type(e).__name__}: {e}"[:200]}
    if len(raw) <= MAX_INFO_BYTES and _depth(out) <= 16:
        return out
    # Half the budget: escaping the JSON text as a string at most doubles it.
    return {"truncated": raw[: MAX_INFO_BYTES // 2].decode("utf-8", errors="ignore"), "bytes": len(raw)}


def _depth(x: Any, limit: int = 16) -> int:
    """Nesting depth of decoded JSON, level by level (no recursion), stopping past ``limit``."""
    depth, level = 0, [x] if isinstance(x, (dict, list)) else []
    while level and depth <= limit:
        depth += 1
        level = [v for c in level for v in (c.values() if isinstance(c, dict) else c) if isinstance(v, (dict, list))]
    return depth


class Environment:
    """Subclass it: a ``Params`` struct, ``__init__(params, task)``, and ``step``."""

    Params: ClassVar[type[Struct]] = NoParams
    tools: list[Tool] = []

    def __init__(self, params: Any, task: EpisodeTask) -> None:
        self.params = params
        self.task = task

    @classmethod
    def load_shared(cls, params: Any) -> None:
        """Load what every episode with these params shares (a model, a dataset), once: it
        runs on the rollout's main thread before an episode's environment is made (libraries
        that install signal handlers need that thread), so it must be quick after its first
        call. Does nothing by default."""
        return None

    async def reset(self) -> list[Message]:
        """Messages after the task's prompt, before the first turn (none by default)."""
        return []

    async def step(self, turn: AssistantTurn) -> StepResult:
        raise NotImplementedError(f"{type(self).__name__} must implement step(turn)")

    async def close(self) -> None:
        return None


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def tool_reply(name: str, text: str) -> Message:
    return {"role": "tool", "name": name, "content": text}


def check_messages(messages: Any, where: str) -> list[Message]:
    """``messages`` as the rollout can write them; ``ValueError`` saying what is wrong."""
    if not isinstance(messages, list):
        raise ValueError(f"{where} returned {type(messages).__name__}, not a list of messages")
    out = []
    for i, m in enumerate(messages):
        if isinstance(m, ChatMessage):
            m = {"role": m.role, "content": m.content}
        if not isinstance(m, dict) or m.get("role") not in ("user", "tool", "system") or not isinstance(
                m.get("content"), str):
            raise ValueError(f"{where} message {i} is not {{role: user|tool|system, content: str}}: {str(m)[:200]}")
        out.append(m)
    return out


def convert_params(cls: type[Environment], params: dict[str, Any]) -> Any:
    """The environment's typed params; ``ValueError`` naming the bad one."""
    try:
        return msgspec.convert(params, cls.Params)
    except msgspec.ValidationError as e:
        raise ValueError(f"bad params for environment {cls.__name__}: {e}") from None


__all__ = ["AssistantTurn", "Environment", "EpisodeTask", "Message", "NoParams", "StepResult", "check_messages",
           "convert_params", "recorded_info", "tool_reply", "user"]
