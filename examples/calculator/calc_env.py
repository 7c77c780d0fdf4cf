"""A calculator the model may ask: the multi-turn example's environment (examples/calculator.toml).

Written against rlvr-actor's public interface only (docs/environments.md), as
a user would write one. The task's prompt is a problem such as "37*04=". On
its first turn the model either answers ("148") or asks the calculator by
writing "=" alone; the calculator then answers with the value and an "="
("148="), and the model's next turn is its answer. The reward is 1 for the
right answer, whichever way it was found, 0 otherwise; a model that asks
twice, or answers in the wrong form, gets 0.

The model (a 0.8M-parameter character model) cannot multiply: the tool is the
only way to solve these problems, and RL is what teaches it to use it for
them (it was warmed up on sums, where it may answer either way).
"""

from __future__ import annotations

from rlvr.rollout.builtin_tools import CalculatorInputError, evaluate
from rlvr.rollout.envs.base import AssistantTurn, Environment, EpisodeTask, StepResult

ASK = "="


class Calculator(Environment):
    def __init__(self, params, task: EpisodeTask) -> None:
        super().__init__(params, task)
        question = task.prompt if isinstance(task.prompt, str) else task.prompt[-1].content
        self.expression = question.rstrip("=")
        self.value = evaluate(self.expression)
        self.asked = False

    async def step(self, turn: AssistantTurn) -> StepResult:
        said = turn.text.strip()
        if said == ASK and not self.asked:
            self.asked = True
            try:
                reply = f"{self.value}{ASK}"
            except CalculatorInputError as e:  # never for these problems; the model would be told
                reply = f"error: {e}"
            return StepResult(messages=[{"role": "tool", "name": "calculator", "content": reply}],
                              info={"asked": True})
        right = said == str(self.value)
        return StepResult(reward=1.0 if right else 0.0, done=True, info={"asked": self.asked})
