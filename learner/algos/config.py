"""Typed configuration of the learner's algorithms, with no torch import.

The run config (``rlvr.cli.run_config``) embeds these structs, and every role
decodes the run config, so they must stay importable without torch: the
verifier role never imports it. The functions they configure live next
door (advantages.py, policy_loss.py, aggregation.py, kl.py).
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

AdvantageName = Literal["grpo", "drgrpo", "rloo"]
AggregationMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLEstimator = Literal["k1", "k2", "k3"]


class AdvantageConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # Estimator: "grpo" (r - mean) / (std + eps); "drgrpo" r - mean, no std (no difficulty bias);
    # "rloo" r minus the mean of the other G - 1 rewards.
    name: AdvantageName = "grpo"
    eps: float = 1e-6  # added to the std in ``grpo``
    # Token-level credit (DeepSeekMath's process supervision, learner/algos/process.py): "steps"
    # from a step verifier's per-step rewards (arith_steps, math_steps); "turns" from a multi-turn
    # environment's per-turn rewards; "off": one advantage per completion, from its reward.
    process: Literal["off", "steps", "turns"] = "off"
    # With `process`: add this times the outcome advantage (`name`) to every token (0: process only).
    outcome_weight: Annotated[float, Meta(ge=0)] = 0.0


class PolicyLossConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # The policy loss; "ppo_clip" (clip-higher, optional dual-clip, TIS and KL) is the only one.
    name: Literal["ppo_clip"] = "ppo_clip"
    eps_low: Annotated[float, Meta(ge=0.0, lt=1.0)] = 0.2  # ratio floor 1 - eps_low
    eps_high: Annotated[float, Meta(ge=0.0)] = 0.28  # ratio ceiling 1 + eps_high (DAPO clip-higher)
    dual_clip_c: Annotated[float, Meta(gt=1.0)] | None = None  # e.g. 3.0; None disables dual-clip
    tis_cap: Annotated[float, Meta(gt=0.0)] | None = 2.0  # C in min(π_old/π_behaviour, C); None disables TIS
    # Per-token losses to one scalar: "token-mean" (DAPO: every token counts the same), "seq-mean-token-mean"
    # (GRPO: every sequence the same), "seq-mean-token-sum-norm" (Dr. GRPO: token sums / norm_length).
    aggregation: AggregationMode = "token-mean"
    norm_length: Annotated[int, Meta(gt=0)] = 1024  # constant L for seq-mean-token-sum-norm: the sampling max_tokens
    kl_coef: Annotated[float, Meta(ge=0.0)] = 0.0  # β; 0 means no reference model is needed
    # Per-token KL estimator, used when kl_coef > 0: "k1" unbiased, high variance; "k2" biased,
    # low variance; "k3" unbiased, low variance, never negative (GRPO's).
    kl_estimator: KLEstimator = "k3"
