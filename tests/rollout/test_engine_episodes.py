"""Both engines serve multi-turn episodes token-in/token-out: a turn is generated from the conversation's
token ids, its ids are kept as sampled, and its behaviour log-probs are what a forward pass over the
whole episode gives at the policy's positions (no re-tokenization desync, rllm-org/rllm#816)."""

from __future__ import annotations

import time

from rlvr.protocol import SamplingParams, Task, VerifierSpec
from rlvr.protocol.tasks import EnvSpec
from rlvr.rollout.envs.registry import load_environments
from rlvr.rollout.episodes import EpisodeSettings, run_episode

TOL = 0.01
load_environments(["tests.env_fixtures:QuizEnv"])


def test_an_episode_s_policy_tokens_carry_the_log_probs_of_the_whole_sequence(loop, engine, weight_dirs, versions,
                                                                              reference):
    v = next(versions)
    loop.run(engine.load_weights(weight_dirs["base"], v))
    task = Task(run="t", task_id="t-ep", dataset="d", index=0, prompt="Add.", verifier=VerifierSpec("env"),
                n=1, sampling=SamplingParams(temperature=1.0, max_tokens=4), policy_version=v, created_at=time.time(),
                env=EnvSpec("tests.env_fixtures:QuizEnv", {"questions": 2}, max_turns=2, max_tokens=40))
    r = loop.run(run_episode(engine, task, 0, EpisodeSettings(env_timeout_s=30)))
    e, c = r.episode, r.completion
    assert len(e.turns) >= 2 and e.end_reason in ("done", "max_turns", "token_budget")
    assert 0 < sum(c.mask) < len(c.mask) and all(t.policy_version == v for t in e.turns)
    ref = reference.logprobs(weight_dirs["base"], r.prompt_ids, c.ids, 1.0)
    policy = [i for i, m in enumerate(c.mask) if m]
    worst = max(abs(c.logprobs[i] - ref[i]) for i in policy)
    assert worst < TOL, worst
