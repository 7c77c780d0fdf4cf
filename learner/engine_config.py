"""Typed configuration of the learner's training engine (DeepSpeed).

The engine gets only this struct; the learner actor's config embeds it as
its ``[learn.engine]`` section. Unknown keys are an error that names the key
(``forbid_unknown_fields``).

Not covered: the bus, batch sizes in groups, staleness and checkpoint
cadence (the learner actor's config).
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

from rlvr.learner.algos.config import AdvantageConfig, PolicyLossConfig


class OptimizerConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """torch.optim.AdamW hyper-parameters (a torch optimizer, so DeepSpeed
    builds no C++ optimizer op)."""

    lr: Annotated[float, Meta(gt=0.0)] = 1e-6
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: Annotated[float, Meta(ge=0.0)] = 0.0
    eps: Annotated[float, Meta(gt=0.0)] = 1e-8


class ConstantSchedule(Struct, frozen=True, forbid_unknown_fields=True, tag="constant"):
    """Linear warm-up from 0 over ``warmup_steps``, then a constant LR."""

    warmup_steps: Annotated[int, Meta(ge=0)] = 0


class CosineSchedule(Struct, frozen=True, forbid_unknown_fields=True, tag="cosine"):
    """Linear warm-up, then cosine decay to ``min_lr_ratio * lr`` at ``total_steps``."""

    total_steps: Annotated[int, Meta(gt=0)]
    warmup_steps: Annotated[int, Meta(ge=0)] = 0
    min_lr_ratio: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.0


Schedule = ConstantSchedule | CosineSchedule
ExportDtype = Literal["bf16", "fp16", "fp32"]


class EngineConfig(Struct, frozen=True, forbid_unknown_fields=True):
    model_path: str  # a Hugging Face model folder (config.json + weights)
    zero_stage: Literal[0, 1, 2, 3] = 2
    bf16: bool = False  # bf16 weights and activations, fp32 master weights in the optimizer
    gradient_checkpointing: bool = False
    offload_optimizer: bool = False  # ZeRO >= 1: optimizer states in CPU memory
    # Micro-batches hold at most this many *padded* tokens (rows x longest row);
    # a sample longer than this gets a micro-batch of its own.
    micro_batch_tokens: Annotated[int, Meta(gt=0)] = 4096
    optimizer: OptimizerConfig = OptimizerConfig()
    schedule: Schedule = ConstantSchedule()
    grad_clip: Annotated[float, Meta(gt=0.0)] | None = 1.0
    # The rollout engine samples from softmax(logits / T); the learner's
    # log-probs must be of the same distribution.
    temperature: Annotated[float, Meta(gt=0.0)] = 1.0
    loss: PolicyLossConfig = PolicyLossConfig()
    advantage: AdvantageConfig = AdvantageConfig()  # used by the actor's group assembly
    # Reference model for the KL term (only built when loss.kl_coef > 0):
    # replaced by the current policy every N steps; None keeps the initial one.
    ref_update_every: Annotated[int, Meta(gt=0)] | None = None
    export_dtype: ExportDtype | None = None  # weights published to rollouts; None: bf16 if bf16 else fp32
    export_shard_bytes: Annotated[int, Meta(gt=0)] = 1 << 30
    pad_token_id: Annotated[int, Meta(ge=0)] = 0


__all__ = ["ConstantSchedule", "CosineSchedule", "EngineConfig", "ExportDtype", "OptimizerConfig", "Schedule"]
