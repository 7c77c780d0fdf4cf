"""The ``env`` verifier: a multi-turn episode's reward is what its environment said.

An environment gives a reward at each step (``StepResult.reward``); their sum
is the episode's environment reward (``Episode.env_reward``). This verifier
passes it on: the reward is ``scale * env_reward``, outcome ``ok`` when it is
at or above ``solved_at`` (pass@k counts ``ok``), else ``wrong``. To add a
check of the final answer, make it a ``composite`` part next to a rule-based
verifier: ``parts = [{name = "math", ...}, {name = "env", weight = 0.5}]``.

A sample that is not an episode is a ``parse_error``: there is no
environment reward to read. An episode the environment ended by failing
never gets here: the verify role gives it outcome ``error`` first.
"""

from __future__ import annotations

from msgspec import Struct

from rlvr.protocol.samples import Verdict
from rlvr.verify.registry import Verifier, VerifyContext


class EnvRewardParams(Struct, frozen=True, forbid_unknown_fields=True):
    # The reward is scale times the episode's environment reward.
    scale: float = 1.0
    # The environment reward at or above which the episode counts as solved (outcome ok).
    solved_at: float = 1.0
    # Unused here; accepted so a dataset's answer (params.gold) may travel with env tasks.
    gold: object = None


def score_env(completion: str, p: EnvRewardParams, ctx: VerifyContext) -> Verdict:
    e = ctx.episode
    if e is None:
        return Verdict(0.0, "parse_error", "env", detail="not a multi-turn episode: no environment reward")
    components = {"env": e.env_reward, "turns": float(e.turn_count)}
    outcome = "ok" if e.env_reward >= p.solved_at else "wrong"
    return Verdict(p.scale * e.env_reward, outcome, "env", components=components,
                   detail=f"episode ended {e.end_reason} after {e.turn_count} turns")


ENV = Verifier("env", EnvRewardParams, score_env)

__all__ = ["ENV", "EnvRewardParams", "score_env"]
