"""Typed configuration of the learner's algorithms, with no torch import.

The run config (``rlvr.cli.run_config``) embeds these structs, and every role
decodes the run config, so they must stay importable without torch: the
verifier role never imports it. The functions they configure live next
door (advantages.py, policy_loss.py, aggregation.py, kl.py, gae.py, value_loss.py).
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

# The group estimators (advantages.py's registry), and "gae": PPO's critic, computed per token by
# the engine (gae.py, learner/train/critic.py).
GroupAdvantageName = Literal["grpo", "drgrpo", "rloo"]
AdvantageName = Literal[GroupAdvantageName, "gae"]
AggregationMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLEstimator = Literal["k1", "k2", "k3"]


class CriticConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """PPO's critic (``advantage.name = "gae"``): a value per token, trained with a clipped value loss.

    ``kind = "value_head"``: a linear head on the policy's last hidden state, inside the policy's
    DeepSpeed engine. One engine, one optimizer and one checkpoint hold both, so the critic resumes
    exactly once with the policy at no extra cost, and it costs H + 1 parameters and one more forward
    pass per step (the old values), not a second model. The price: the value loss shapes the shared
    trunk too (``loss_coef`` weighs it). ``"separate"`` (a critic model of its own under DeepSpeed,
    as verl and OpenRLHF run it) is the room left for the other choice; it is refused today.
    """

    # "value_head" (on the policy, one engine); "separate" (its own model: not supported yet).
    kind: Literal["value_head", "separate"] = "value_head"
    # Learning rate of the value head (its own AdamW parameter group; the lr schedule scales it too).
    # None: learn.engine.optimizer.lr.
    lr: Annotated[float, Meta(gt=0.0)] | None = None
    # PPO's value clip: a new value may move at most this far from the old one before the loss
    # takes the larger of the clipped and unclipped squared errors. None: no clipping.
    value_clip: Annotated[float, Meta(gt=0.0)] | None = 0.2
    # Weight of the value loss against the policy loss (c1 in PPO's L = L_clip - c1 L_VF).
    loss_coef: Annotated[float, Meta(gt=0.0)] = 0.5
    # Optimizer steps, at the start of RL, where only the value head trains (the policy's
    # parameters get lr 0), so the first advantages do not come from an untrained critic.
    warmup_steps: Annotated[int, Meta(ge=0)] = 0


class AdvantageConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # Estimator: "grpo" (r - mean) / (std + eps); "drgrpo" r - mean, no std (no difficulty bias);
    # "rloo" r minus the mean of the other G - 1 rewards; "gae": PPO with a critic (``critic``),
    # generalised advantage estimation per token over the reward at each completion's last token.
    name: AdvantageName = "grpo"
    eps: float = 1e-6  # added to the std in ``grpo``
    # Token-level credit (DeepSeekMath's process supervision, learner/algos/process.py): "steps"
    # from a step verifier's per-step rewards (arith_steps, math_steps); "turns" from a multi-turn
    # environment's per-turn rewards; "off": one advantage per completion, from its reward.
    process: Literal["off", "steps", "turns"] = "off"
    # With `process`: add this times the outcome advantage (`name`) to every token (0: process only).
    outcome_weight: Annotated[float, Meta(ge=0)] = 0.0
    # "gae" only: the discount γ (1.0: no discount, verl's default).
    gamma: Annotated[float, Meta(ge=0.0, le=1.0)] = 1.0
    # "gae" only: GAE's λ, the bias-variance trade-off of the advantage (1.0: the Monte-Carlo return).
    lam: Annotated[float, Meta(ge=0.0, le=1.0)] = 1.0
    # "gae" only: standardise the advantages over the step's policy tokens (verl's masked_whiten).
    whiten: bool = True
    # "gae" only: the value model.
    critic: CriticConfig = CriticConfig()

    def __post_init__(self) -> None:
        if self.critic.kind == "separate":
            raise ValueError(
                'learn.engine.advantage.critic.kind = "separate" is not supported yet: the critic is a value '
                'head on the policy (kind = "value_head"; docs/design.md, "Advantages")'
            )
        if self.name == "gae" and self.process != "off":
            raise ValueError(
                f'learn.engine.advantage.process = "{self.process}" needs a group estimator (grpo, drgrpo, rloo); '
                'with name = "gae" the critic credits each token: set process = "off"'
            )


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
