"""An OpenEnv environment server for the adapter's tests: an arithmetic quiz (openenv-core's own API).

    python -m uvicorn tests.openenv_quiz_server:app --host 127.0.0.1 --port PORT

Each session: ``reset(seed)`` asks a sum; each ``step({"message": answer})``
scores it (reward 1 if right) and asks the next; done after three.
"""

from __future__ import annotations

import random
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app


class QuizAction(Action):
    message: str


class QuizObservation(Observation):
    question: str = ""
    asked: int = 0


class QuizState(State):
    answers: list[int] = []


class QuizEnvironment(Environment[QuizAction, QuizObservation, QuizState]):
    SUPPORTS_CONCURRENT_SESSIONS = True
    QUESTIONS = 3

    def __init__(self) -> None:
        super().__init__()
        self._state = QuizState(episode_id=str(uuid4()))
        self._questions: list[tuple[int, int]] = []

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> QuizObservation:
        rng = random.Random(seed)
        self._questions = [(rng.randint(1, 20), rng.randint(1, 20)) for _ in range(self.QUESTIONS)]
        self._state = QuizState(episode_id=episode_id or str(uuid4()), step_count=0)
        return self._ask(0, reward=None)

    def _ask(self, k: int, reward: float | None) -> QuizObservation:
        a, b = self._questions[k]
        return QuizObservation(question=f"{a}+{b}=", asked=k, done=False, reward=reward)

    def step(self, action: QuizAction, timeout_s: float | None = None, **kwargs: Any) -> QuizObservation:
        k = self._state.step_count
        a, b = self._questions[k]
        reward = 1.0 if action.message.strip() == str(a + b) else 0.0
        self._state.step_count += 1
        if self._state.step_count == self.QUESTIONS:
            return QuizObservation(question="", asked=self.QUESTIONS, done=True, reward=reward)
        return self._ask(self._state.step_count, reward)

    @property
    def state(self) -> QuizState:
        return self._state


app = create_fastapi_app(QuizEnvironment, QuizAction, QuizObservation, max_concurrent_envs=16)
