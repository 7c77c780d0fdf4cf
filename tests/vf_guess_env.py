"""A ``verifiers`` environment for the adapter's tests, written with verifiers' own classic API.

``verifiers.load_environment("tests.vf_guess_env")`` imports this module and
calls ``load_environment``: a number-guessing game whose rubric rewards
finding the number (1.0) and doing it in few guesses (0.5 x 1/guesses).
"""

from __future__ import annotations

import verifiers as vf
from datasets import Dataset

parser = vf.XMLParser(fields=["guess"], answer_field="guess")


class GuessEnv(vf.MultiTurnEnv):
    async def setup_state(self, state):
        state["guesses"] = []
        return state

    async def env_response(self, messages, state, **kwargs):
        g = parser.parse_answer(messages)
        target = int(state["answer"])
        try:
            g = int(g)
        except (TypeError, ValueError):
            return [vf.UserMessage(content="Use the format <guess>N</guess>.")]
        state["guesses"].append(g)
        if g == target:
            state["final_env_response"] = [vf.UserMessage(content="correct")]
            return state["final_env_response"]
        return [vf.UserMessage(content="higher" if g < target else "lower")]


def solved(state, answer, **kwargs) -> float:
    return float(int(answer) in state.get("guesses", []))


def efficiency(state, answer, **kwargs) -> float:
    guesses = state.get("guesses", [])
    return 1.0 / len(guesses) if int(answer) in guesses else 0.0


def load_environment(max_turns: int = 6, **kwargs):
    rows = [{"question": "I picked a number from 1 to 10. Reply with <guess>N</guess>.", "answer": str(n)}
            for n in (7, 3, 9, 1)]
    rubric = vf.Rubric(funcs=[solved, efficiency], weights=[1.0, 0.5], parser=parser)
    return GuessEnv(dataset=Dataset.from_list(rows), system_prompt="You are playing a guessing game.",
                    parser=parser, rubric=rubric, max_turns=max_turns, **kwargs)


def load_tool_environment(**kwargs):
    def add(a: int, b: int) -> int:
        return a + b

    return vf.ToolEnv(tools=[add], dataset=Dataset.from_list([{"question": "2+3?", "answer": "5"}]))
