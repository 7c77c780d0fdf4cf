"""Step time and GPU-hours of a run: an estimate at a stated MFU and decode rate, never a measurement.

Per optimizer step, B = ``groups_per_step`` prompts x G = ``group_size`` completions:

- learner seconds = model FLOPs of the step (``learner/train/flops.py``'s PaLM count:
  6 N tokens + 12 L d S^2 per sample) x ``ppo_epochs`` / (MFU x peak bf16 FLOP/s x learner GPUs);
- rollout seconds = completion tokens of the step / (decode tokens/s per GPU x rollout GPUs);
- a step takes the longer of the two when rollouts run ahead (``max_staleness >= 1``), their sum
  otherwise. Dynamic sampling makes the rollout generate more groups than it trains: the
  ``keep`` share (1.0 = every group kept) divides the rollout's work;
- GPU-hours = the run's hours x the GPUs it holds, each counted once: a GPU the learner shares with
  the rollout is one GPU. With no rollout GPU in the plan (``up.rollout_replicas = 0``: replicas
  started elsewhere; an HF engine on CPU) the rollout's time is taken at one GPU's decode rate
  and no GPU is charged for it.

Lengths: the prompt's mean token count over the sampled tasks (``max_prompt_tokens`` when no
tokenizer loads) and the completion at ``max_tokens`` (the worst case: a run whose answers are
shorter is faster). Every assumption is returned beside the figures.
"""

from __future__ import annotations

import msgspec

from rlvr.cli.plan.shapes import ModelShape


class CostAssumptions(msgspec.Struct, frozen=True):
    mfu: float = 0.2  # learner model-FLOPs utilisation (20%: measured on one H200, issue 14)
    peak_tflops: float = 989.4  # dense bf16 peak per GPU (H100/H200 SXM)
    decode_tokens_per_s: float = 5000.0  # rollout decode rate per GPU, all sequences together
    keep: float = 1.0  # share of groups dynamic sampling keeps
    gpu_hour_price: float = 0.0  # per GPU-hour; 0: no money figure


class CostEstimate(msgspec.Struct, frozen=True):
    samples_per_step: int
    prompt_tokens: float
    completion_tokens: int
    learner_tflop_per_step: float
    learner_s: float
    rollout_s: float
    step_s: float
    overlapped: bool
    run_hours: float
    gpus: int  # GPUs the run holds, each counted once
    rollout_gpus: int  # 0: no rollout GPU in the plan (its time at one GPU's rate, not charged)
    gpu_hours: float
    cost: float | None
    assumptions: CostAssumptions


def estimate(shape: ModelShape, *, group_size: int, groups_per_step: int, steps: int, prompt_tokens: float,
             completion_tokens: int, ppo_epochs: int, overlapped: bool, learner_gpus: int, rollout_gpus: int,
             gpus: int, a: CostAssumptions) -> CostEstimate:
    """``learner_gpus`` and ``rollout_gpus`` set the two rates; ``gpus`` (the GPUs held, a shared one
    once) is what the hours are charged for."""
    from rlvr.learner.train.flops import step_flops

    n = group_size * groups_per_step
    length = int(prompt_tokens + completion_tokens)
    flops = step_flops(shape.matmul_params, shape.layers, shape.hidden, [length] * n) * ppo_epochs
    learner_s = flops / (a.mfu * a.peak_tflops * 1e12 * max(1, learner_gpus))
    rollout_s = n * completion_tokens / max(a.keep, 1e-3) / (a.decode_tokens_per_s * max(1, rollout_gpus))
    step_s = max(learner_s, rollout_s) if overlapped else learner_s + rollout_s
    hours = step_s * steps / 3600
    return CostEstimate(
        samples_per_step=n, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
        learner_tflop_per_step=flops / 1e12, learner_s=learner_s, rollout_s=rollout_s, step_s=step_s,
        overlapped=overlapped, run_hours=hours, gpus=gpus, rollout_gpus=rollout_gpus, gpu_hours=hours * gpus,
        cost=hours * gpus * a.gpu_hour_price if a.gpu_hour_price else None, assumptions=a,
    )


__all__ = ["CostAssumptions", "CostEstimate", "estimate"]
