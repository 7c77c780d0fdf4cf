"""The ``tools`` environment: the model answers a task's prompt, with built-in tools at hand.

``env = {name = "tools", params = {tools = ["calculator", "python"]}}``: the
prompt is the task's; the model may call the listed tools (the rollout runs
them and answers with their results) and the episode ends at the first turn
that calls none. That turn is the answer the task's verifier scores; the
environment itself gives no reward. ``python`` runs in the sandbox of
``[rollout.sandbox]``, at the code verifier's levels and limits.
"""

from __future__ import annotations

from msgspec import Struct

from rlvr.rollout.builtin_tools import builtin_tools
from rlvr.rollout.envs.base import AssistantTurn, Environment, EpisodeTask, StepResult


class ToolsParams(Struct, frozen=True, forbid_unknown_fields=True):
    # Built-in tools the model is offered: "calculator", "python".
    tools: tuple[str, ...] = ("calculator",)


class ToolsEnvironment(Environment):
    Params = ToolsParams

    def __init__(self, params: ToolsParams, task: EpisodeTask) -> None:
        super().__init__(params, task)
        available = builtin_tools()
        unknown = [t for t in params.tools if t not in available]
        if unknown:
            raise ValueError(f"unknown built-in tools {unknown} (there are: {', '.join(sorted(available))})")
        self.tools = [available[t] for t in params.tools]

    async def step(self, turn: AssistantTurn) -> StepResult:
        return StepResult(done=True)  # a turn without a tool call is the answer


__all__ = ["ToolsEnvironment", "ToolsParams"]
