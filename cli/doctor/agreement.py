"""Log-prob agreement between the rollout engine and the learner on the same tokens.

At each sampled position the rollout engine's processed distribution (after temperature,
top-k, top-p: what it sampled from) is compared with the learner's (log softmax of its logits
at ``learn.engine.temperature``, what it trains on):

- ``sampled_abs_diff``: |behaviour log-prob - learner log-prob| of the sampled token, the
  figure most frameworks report (mean and max over positions);
- ``kl``: KL(rollout || learner) over the whole vocabulary, mean over positions: it sees a
  difference in the probability of tokens that were not sampled, which the sampled-token
  difference misses (SkyRL#2201);
- ``topk_overlap``: the share of the rollout's k most likely tokens that are also the learner's.

Thresholds (``Thresholds``) are for fp32 on both sides; bf16 on either side raises them. Pure
torch: no engine, no config.
"""

from __future__ import annotations

import msgspec
import torch


class Thresholds(msgspec.Struct, frozen=True):
    sampled_abs_diff_mean: float = 0.02
    kl: float = 0.01
    topk_overlap: float = 0.8  # at least
    k: int = 5


FP32_THRESHOLDS = Thresholds()
BF16_THRESHOLDS = Thresholds(sampled_abs_diff_mean=0.1, kl=0.05, topk_overlap=0.6)


class Agreement(msgspec.Struct, frozen=True):
    positions: int
    sampled_abs_diff_mean: float
    sampled_abs_diff_max: float
    kl: float | None  # None: the engine gives no full distribution (vLLM: sampled tokens only)
    topk_overlap: float | None
    flagged: bool
    reasons: list[str]


def compare(rollout_logp: torch.Tensor | None, learner_logp: torch.Tensor, sampled: torch.Tensor,
            behaviour: torch.Tensor, th: Thresholds = FP32_THRESHOLDS) -> Agreement:
    """``rollout_logp`` and ``learner_logp``: [P, V] log-probs at P positions (rollout ``-inf`` where
    its top-k/top-p cut a token; None when only ``behaviour`` is known); ``sampled``: [P] token ids;
    ``behaviour``: [P] the rollout's log-probs of them."""
    learner_logp = learner_logp.float()
    learner_sampled = learner_logp.gather(-1, sampled[:, None]).squeeze(-1)
    diff = (behaviour.float() - learner_sampled).abs()
    reasons = []
    kl = overlap = None
    if rollout_logp is not None:
        r = rollout_logp.float()
        p = r.exp()
        terms = torch.where(p > 0, p * (r - learner_logp), torch.zeros_like(p))
        kl = float(terms.sum(-1).mean())
        k = min(th.k, r.shape[-1])
        top_r, top_l = r.topk(k, -1).indices, learner_logp.topk(k, -1).indices
        overlap = float((top_r[:, :, None] == top_l[:, None, :]).any(-1).float().mean())
        if kl > th.kl:
            reasons.append(f"full-vocabulary KL {kl:.4f} > {th.kl}")
        if overlap < th.topk_overlap:
            reasons.append(f"top-{k} overlap {overlap:.2f} < {th.topk_overlap}")
    mean = float(diff.mean()) if diff.numel() else 0.0
    if mean > th.sampled_abs_diff_mean:
        reasons.append(f"sampled-token |diff| mean {mean:.4f} > {th.sampled_abs_diff_mean}")
    return Agreement(
        positions=int(diff.numel()), sampled_abs_diff_mean=mean,
        sampled_abs_diff_max=float(diff.max()) if diff.numel() else 0.0, kl=kl, topk_overlap=overlap,
        flagged=bool(reasons), reasons=reasons,
    )


def likely_causes(*, rollout_temperature: float, learner_temperature: float, top_p: float, top_k: int,
                  rollout_dtype: str, learner_bf16: bool, before_ok: bool | None, reloaded: bool,
                  same_prompt_ids: bool = True) -> list[str]:
    """What can make the two sides disagree, from the settings (most likely first)."""
    causes = []
    if abs(rollout_temperature - learner_temperature) > 1e-9:
        causes.append(f"temperature differs: the rollout samples at {rollout_temperature}, the learner computes "
                      f"log-probs at {learner_temperature} (learn.sampling.temperature, learn.engine.temperature)")
    if top_p < 1.0 or top_k > 0:
        causes.append(f"sampling cuts the distribution on the rollout side only (learn.sampling top_p = {top_p}, "
                      f"top_k = {top_k}); the learner's log-probs are of the full softmax: set top_p = 1, top_k = -1")
    if before_ok and not reloaded:
        causes.append("weights not reloaded: the rollout agreed before the training step and not after it "
                      "(learn.sync_every, learn.weights_transport, the rollout's reload log)")
    rollout_bf16 = rollout_dtype in ("bfloat16", "float16", "auto")
    if rollout_bf16 != learner_bf16:
        causes.append(f"dtype differs: rollout.engine.dtype = {rollout_dtype!r}, learn.engine.bf16 = "
                      f"{str(learner_bf16).lower()}")
    if not same_prompt_ids:
        causes.append("the prompt's token ids differ between the sides (a chat-template difference)")
    return causes or ["none found in the settings: compare the two models' folders (rollout.engine.model, "
                      "learn.engine.model_path) and the engines' attention kernels"]


__all__ = ["Agreement", "BF16_THRESHOLDS", "FP32_THRESHOLDS", "Thresholds", "compare", "likely_causes"]
