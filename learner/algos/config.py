"""Typed configuration of the learner's algorithms, with no torch import.

The run config (``rlvr.actors.config``) embeds these structs, and every role
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
    name: AdvantageName = "grpo"
    eps: float = 1e-6  # added to the std in ``grpo``


class PolicyLossConfig(Struct, frozen=True, forbid_unknown_fields=True):
    name: Literal["ppo_clip"] = "ppo_clip"
    eps_low: Annotated[float, Meta(ge=0.0, lt=1.0)] = 0.2  # ratio floor 1 - eps_low
    eps_high: Annotated[float, Meta(ge=0.0)] = 0.28  # ratio ceiling 1 + eps_high (DAPO clip-higher)
    dual_clip_c: Annotated[float, Meta(gt=1.0)] | None = None  # e.g. 3.0; None disables dual-clip
    tis_cap: Annotated[float, Meta(gt=0.0)] | None = 2.0  # C in min(π_old/π_behaviour, C); None disables TIS
    aggregation: AggregationMode = "token-mean"
    norm_length: Annotated[int, Meta(gt=0)] = 1024  # constant L for seq-mean-token-sum-norm: the sampling max_tokens
    kl_coef: Annotated[float, Meta(ge=0.0)] = 0.0  # β; 0 means no reference model is needed
    kl_estimator: KLEstimator = "k3"
