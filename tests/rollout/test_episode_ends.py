"""An episode the rollout cut (the chat template rewrote a turn and on_template_rewrite = "end", or the
conversation outgrew the engine's max_prompt_tokens) is never a wrong answer: it ends saying which cut,
the verifier scores it outcome error, and the learner drops it as episode_cut, counted apart.

The environment is tests/env_fixtures.py's QuizEnv (arithmetic questions one after another); the
engines are the trivial engine behind the same prompt check the real ones make, and a scripted one
whose template strips earlier turns' <think> blocks as Qwen3's does.
"""

from __future__ import annotations

import time

import anyio
import msgspec

from rlvr.learner.custody.groups import Group, filter_group, judged
from rlvr.protocol import SamplingParams, Scored, Task, Verdict, VerifierSpec
from rlvr.protocol.samples import CUT_ENDS, ENV_FAILURES, Episode, Turn
from rlvr.protocol.tasks import EnvSpec
from rlvr.rollout.engines.base import Generation, GroupResult, PromptTooLongError, TrivialEngineConfig
from rlvr.rollout.engines.trivial import ByteChatCodec, TrivialEngine
from rlvr.rollout.envs.registry import load_environments
from rlvr.rollout.episodes import EpisodeSettings, run_episode
from rlvr.verify.actor import VerifyActor
from rlvr.verify.config import VerifyConfig
from tests.factories import make_scored

load_environments(["tests.env_fixtures:QuizEnv"])


def _task(*, max_tokens: int = 4096, questions: int = 9) -> Task:
    return Task(run="t", task_id="t-t0", dataset="d", index=0, prompt="Answer each sum.",
                verifier=VerifierSpec("env"), n=2, sampling=SamplingParams(max_tokens=8, seed=3),
                policy_version=0, created_at=time.time(),
                env=EnvSpec("tests.env_fixtures:QuizEnv", {"questions": questions}, max_turns=12,
                            max_tokens=max_tokens))


def _run(engine, task, settings: EpisodeSettings | None = None):
    async def main():
        return await run_episode(engine, task, 0, settings or EpisodeSettings())

    return anyio.run(main)


class CappedEngine(TrivialEngine):
    """The trivial engine behind the prompt check vLLM's and HF's generate_ids make."""

    def __init__(self, max_prompt_tokens: int) -> None:
        super().__init__(TrivialEngineConfig(accuracy=1.0))
        self.max_prompt_tokens = max_prompt_tokens

    async def generate_ids(self, prompt_ids, n, sampling):
        if len(prompt_ids) > self.max_prompt_tokens:
            raise PromptTooLongError(len(prompt_ids), self.max_prompt_tokens)
        return await super().generate_ids(prompt_ids, n, sampling)


def test_the_engine_s_prompt_limit_ends_an_episode_prompt_cap_not_token_budget():
    r = _run(CappedEngine(max_prompt_tokens=80), _task(max_tokens=4096))
    e = r.episode
    assert e.end_reason == "prompt_cap" and len(e.turns) >= 1, e
    assert "max_prompt_tokens (80)" in e.detail and "of the episode's max_tokens (4096) left" in e.detail
    assert r.finish_reason == "abort"
    # The episode's own budget, spent first, is still token_budget.
    r = _run(CappedEngine(max_prompt_tokens=10_000), _task(max_tokens=30))
    assert r.episode.end_reason == "token_budget"


class ThinkStrippingCodec(ByteChatCodec):
    """Qwen3's habit: an assistant turn before the last user message loses its <think> block."""

    def render(self, messages, *, tools, add_generation_prompt):
        last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        shown = [dict(m, content=m["content"].split("</think>")[-1]) if m["role"] == "assistant" and i < last_user
                 else m for i, m in enumerate(messages)]
        return super().render(shown, tools=tools, add_generation_prompt=add_generation_prompt)


class ThinkingEngine:
    """Thinks, then answers the last sum in the conversation (tokens are utf-8 bytes)."""

    weights_version = 0

    def chat_codec(self):
        return ThinkStrippingCodec()

    async def generate_ids(self, prompt_ids, n, sampling):
        question = bytes(prompt_ids).decode().rsplit("user: ", 1)[1].split("=")[0]
        a, b = question.split("+")
        text = f"<think>{a} plus {b}</think>{int(a) + int(b)}"
        ids = list(text.encode())
        return GroupResult(list(prompt_ids), [Generation(ids, [-0.5] * len(ids), text, "stop")], 0, 0)


def test_a_template_rewrite_with_on_template_rewrite_end_ends_the_episode_template_rewrite():
    r = _run(ThinkingEngine(), _task(), EpisodeSettings(on_template_rewrite="end"))
    e = r.episode
    assert e.end_reason == "template_rewrite" and e.template_rewrites == 1 and len(e.turns) == 1
    assert r.finish_reason == "abort"
    kept = _run(ThinkingEngine(), _task(questions=3))  # "keep": it goes on, every rewrite counted
    assert kept.episode.end_reason == "done" and kept.episode.template_rewrites == 2


def _episode_scored(end: str, k: int = 0, i: int = 0, reward: float = 0.0, outcome: str = "wrong") -> Scored:
    sc = make_scored(k=k, i=i, reward=reward, outcome=outcome)
    episode = Episode("quiz", [Turn(0, 2, 0)], end, detail="cut")  # type: ignore[arg-type]
    return msgspec.structs.replace(sc, sample=msgspec.structs.replace(sc.sample, episode=episode))


def test_the_verifier_scores_a_cut_episode_error_never_a_wrong_answer():
    assert set(CUT_ENDS) == {"template_rewrite", "prompt_cap"} and set(CUT_ENDS) <= set(ENV_FAILURES)
    actor = VerifyActor(VerifyConfig())
    for end in CUT_ENDS:
        verdict = actor._verdict_now(_episode_scored(end).sample)
        assert verdict is not None and verdict.outcome == "error" and f"episode ended {end}" in verdict.detail


def test_the_learner_drops_cut_episodes_as_episode_cut_whatever_their_verdict():
    members = [(0, _episode_scored("prompt_cap", i=0)),  # an older verifier's 0: still dropped
               (1, _episode_scored("template_rewrite", i=1, outcome="error")),
               (2, make_scored(i=2, reward=1.0)), (3, make_scored(i=3, reward=0.0, outcome="wrong"))]
    result = filter_group(Group("t-t0", 4, members, 0.0), current_version=0, max_staleness=1,
                          dynamic_sampling=True, zero_variance_eps=0.0)
    assert sorted(r for *_, r in result.dropped) == ["episode_cut", "episode_cut"] and len(result.kept) == 2
    assert [judged(sc) for _, sc in members] == [False, False, True, True]
    error = msgspec.structs.replace(members[2][1], verdict=Verdict(0.0, "timeout", "exact"))
    assert not judged(error)
