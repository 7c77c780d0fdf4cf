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

    # Peak learning rate; the schedule scales it step by step.
    lr: Annotated[float, Meta(gt=0.0)] = 1e-6
    # AdamW (beta1, beta2): decay rates of the gradient and squared-gradient averages.
    betas: tuple[float, float] = (0.9, 0.999)
    # Decoupled weight decay, applied to every parameter (biases and norms included).
    weight_decay: Annotated[float, Meta(ge=0.0)] = 0.0
    # Added to AdamW's denominator sqrt(v) for numerical stability.
    eps: Annotated[float, Meta(gt=0.0)] = 1e-8


class ConstantSchedule(Struct, frozen=True, forbid_unknown_fields=True, tag="constant"):
    """Linear warm-up from 0 over ``warmup_steps``, then a constant LR."""

    # Optimizer steps of linear warm-up to the full lr (0 = none).
    warmup_steps: Annotated[int, Meta(ge=0)] = 0


class CosineSchedule(Struct, frozen=True, forbid_unknown_fields=True, tag="cosine"):
    """Linear warm-up, then cosine decay to ``min_lr_ratio * lr`` at ``total_steps``."""

    # Optimizer step at which the decay reaches min_lr_ratio * lr (it stays there after); usually learn.steps.
    total_steps: Annotated[int, Meta(gt=0)]
    # Optimizer steps of linear warm-up to the full lr (0 = none), before the decay starts.
    warmup_steps: Annotated[int, Meta(ge=0)] = 0
    # Final learning rate as a fraction of optimizer.lr.
    min_lr_ratio: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.0


Schedule = ConstantSchedule | CosineSchedule
ExportDtype = Literal["bf16", "fp16", "fp32"]
# The attention and MLP projections of Qwen2 / Llama-style models.
LORA_DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """LoRA adapters (peft) on a frozen base; the rollouts then receive the adapter only."""

    # Train low-rank adapters instead of every parameter; false: full-parameter training.
    enabled: bool = False
    # Rank r of each adapter (A: r x in, B: out x r); vLLM rollouts need rollout.engine.max_lora_rank >= r.
    rank: Annotated[int, Meta(ge=1, le=512)] = 16
    # Scale of the adapter's update: W + (alpha / rank) * B @ A.
    alpha: Annotated[float, Meta(gt=0.0)] = 32.0
    # Dropout on the adapter's input while training (0 = none).
    dropout: Annotated[float, Meta(ge=0.0, lt=1.0)] = 0.0
    # Names of the Linear modules that get an adapter (matched against the end of the module path).
    target_modules: tuple[str, ...] = LORA_DEFAULT_TARGETS
    # "4bit": QLoRA, the frozen base in 4-bit NF4 (bitsandbytes, CUDA only; refused on CPU).
    quantize_base: Literal["none", "4bit"] = "none"

    def __post_init__(self) -> None:
        if not self.target_modules:
            raise ValueError("target_modules is empty: name at least one Linear module, e.g. q_proj")
        for name in self.target_modules:
            if not name or not all(part.isidentifier() for part in name.split(".")):
                raise ValueError(f"target_modules entry {name!r} is not a module name")


class TrainEngineConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # a Hugging Face model folder (config.json + weights); "@prepared": the model [learn.prepare] builds and
    # warms up when `up` starts (the built-in example's).
    model_path: str
    # DeepSpeed ZeRO stage: 0 plain data parallel; 1 shards optimizer states across ranks,
    # 2 also gradients, 3 also the parameters (for a model that does not fit on one GPU).
    zero_stage: Literal[0, 1, 2, 3] = 2
    bf16: bool = False  # bf16 weights and activations, fp32 master weights in the optimizer
    # Recompute activations in the backward pass: less memory for an extra forward;
    # turn on when long micro-batches run out of memory.
    gradient_checkpointing: bool = False
    offload_optimizer: bool = False  # ZeRO >= 1: optimizer states in CPU memory
    # Micro-batches hold at most this many tokens: the samples' sum when packed, rows x longest
    # row when padded; a sample longer than this gets a micro-batch of its own.
    micro_batch_tokens: Annotated[int, Meta(gt=0)] = 4096
    # Pack each micro-batch's samples into one row (positions restart per sample, attention stays
    # within each sample) instead of right-padding one row per sample: no compute spent on padding.
    # Log-probs, entropy, every loss aggregation and the gradients equal the padded layout's
    # (tests/learner/test_packing.py: Llama and Qwen2, sdpa and eager, fp32 1e-5), and the engine
    # checks at start that the model keeps packed samples apart, refusing otherwise. Off by
    # default: the models load with sdpa attention, which attends a packed row as one masked
    # row x row block, so a 4096-token row of 100-token samples does ~40x the attention work of
    # its samples (and no faster: bench/learner_packing.py measured 1.02x tokens/s, 1.28x memory).
    # Length-sorted padding already wastes little (11% there). Worth it with flash-attention.
    pack_sequences: bool = False
    # Learning rate, betas, weight decay.
    optimizer: OptimizerConfig = OptimizerConfig()
    # Learning-rate schedule over optimizer steps: type = "constant" | "cosine", both with warm-up.
    schedule: Schedule = ConstantSchedule()
    # Clip the global gradient norm to this value before each step; unset: no clipping.
    grad_clip: Annotated[float, Meta(gt=0.0)] | None = 1.0
    # The rollout engine samples from softmax(logits / T); the learner's
    # log-probs must be of the same distribution.
    temperature: Annotated[float, Meta(gt=0.0)] = 1.0
    # The policy loss: PPO clip bounds, dual-clip, TIS cap, KL penalty and aggregation.
    loss: PolicyLossConfig = PolicyLossConfig()
    # Optimizer steps per batch of samples (PPO epochs). 1: every sample is
    # used once and the PPO ratio is 1 (clipping idle). 2+: later passes reuse
    # the batch against the cached π_old, clipped by eps_low/eps_high: more
    # learning per generated sample when generation is the bottleneck.
    ppo_epochs: Annotated[int, Meta(ge=1, le=16)] = 1
    advantage: AdvantageConfig = AdvantageConfig()  # used by the actor's group assembly
    # Reference model for the KL term (only built when loss.kl_coef > 0):
    # replaced by the current policy every N steps; None keeps the initial one.
    ref_update_every: Annotated[int, Meta(gt=0)] | None = None
    export_dtype: ExportDtype | None = None  # weights published to rollouts; None: bf16 if bf16 else fp32
    # Tensor bytes per safetensors file of published weights; more is split into shards
    # (a tensor is never split, so one larger than this gets a file of its own).
    export_shard_bytes: Annotated[int, Meta(gt=0)] = 1 << 30
    # Token id that right-pads micro-batch rows; padding is masked out of attention and loss,
    # so any valid id works (the tokenizer's pad id is the natural choice).
    pad_token_id: Annotated[int, Meta(ge=0)] = 0
    # LoRA: train adapters on a frozen base and publish only them (enabled = false: full parameters).
    lora: LoraConfig = LoraConfig()

    def __post_init__(self) -> None:
        if self.lora.enabled and self.zero_stage == 3:
            # The chunked log-prob head (token_logprobs.py) recomputes the output head under
            # activation checkpointing; ZeRO-3 leaves a *frozen* head partitioned at that point.
            raise ValueError(
                "lora.enabled with zero_stage = 3 is not supported yet (the frozen output head is still "
                "partitioned when the log-prob chunks are recomputed); use zero_stage = 2 for LoRA"
            )


__all__ = [
    "ConstantSchedule", "CosineSchedule", "TrainEngineConfig", "ExportDtype", "LoraConfig", "OptimizerConfig", "Schedule",
]
