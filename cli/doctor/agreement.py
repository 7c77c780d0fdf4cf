"""Log-prob agreement between the rollout engine and the learner on the same tokens.

At each sampled position the rollout engine's processed distribution (after temperature,
top-k, top-p: what it sampled from) is compared with the learner's (log softmax of its logits
at ``learn.engine.temperature``, what it trains on):

- ``sampled_abs_diff``: |behaviour log-prob - learner log-prob| of the sampled token, the
  figure most frameworks report (mean and max over positions);
- ``kl``: KL(rollout || learner), mean over positions: it sees a difference in the probability
  of tokens that were not sampled, which the sampled-token difference misses (SkyRL#2201).
  Over the whole vocabulary where the engine gives it (HF); where it gives its ``k`` most
  likely tokens only (vLLM's ``logprobs=k``), over those tokens and the rest of the vocabulary
  taken as one outcome: the KL of that coarser split, never above the whole one (the data
  processing inequality), so a flag is certain and a pass says nothing of the tail;
- ``topk_overlap``: the share of the rollout's k most likely tokens that are also the learner's.

Thresholds (``Thresholds``): fp32's where both sides run float32, bf16's where either runs a
16-bit dtype (``thresholds_for``). Measured with ``rlvr-actor doctor`` on the built-in example
(bench/results/doctor_dtype.md): fp32 on both sides agrees to 2e-7 (sampled-token |diff| mean);
a bf16 side against an fp32 one (either way, hf or vLLM) to 0.0034-0.0042 (max 0.027), KL
1.0-1.3e-5, top-5 overlap 0.99 or more. Fast-LLM#525 measured 0.022-0.041 nats (RMS over sampled
tokens) for bf16 against vLLM on Qwen2.5-0.5B and -7B, 0.002 in fp32: bf16's thresholds leave
2.5x room above that, fp32's 10x above fp32's. Pure torch: no engine, no config.
"""

from __future__ import annotations

import msgspec
import torch


class Thresholds(msgspec.Struct, frozen=True):
    sampled_abs_diff_mean: float = 0.02
    kl: float = 0.01
    topk_overlap: float = 0.8  # at least
    k: int = 5

    def text(self) -> str:
        return (f"sampled-token |diff| mean <= {self.sampled_abs_diff_mean:g}, KL <= {self.kl:g}, "
                f"top-{self.k} overlap >= {self.topk_overlap:g}")


FP32_THRESHOLDS = Thresholds()
BF16_THRESHOLDS = Thresholds(sampled_abs_diff_mean=0.1, kl=0.05, topk_overlap=0.6)
HALF_PRECISION = ("bfloat16", "float16")


def thresholds_for(rollout_dtype: str, learner_dtype: str) -> Thresholds:
    """bf16's thresholds when either side runs a 16-bit dtype (bfloat16, float16), else fp32's."""
    return BF16_THRESHOLDS if {rollout_dtype, learner_dtype} & set(HALF_PRECISION) else FP32_THRESHOLDS


class Agreement(msgspec.Struct, frozen=True):
    positions: int
    sampled_abs_diff_mean: float
    sampled_abs_diff_max: float
    kl: float | None  # None: the engine gave no distribution, only the sampled tokens' log-probs
    topk_overlap: float | None
    flagged: bool
    reasons: list[str]
    kl_top: int = 0  # 0: KL over the whole vocabulary; k: over the rollout's k most likely tokens and the rest


def compare(rollout_logp: torch.Tensor | None, learner_logp: torch.Tensor, sampled: torch.Tensor,
            behaviour: torch.Tensor, th: Thresholds = FP32_THRESHOLDS,
            rollout_ids: torch.Tensor | None = None) -> Agreement:
    """``learner_logp``: [P, V] log-probs at P positions; ``sampled``: [P] token ids; ``behaviour``: [P]
    the rollout's log-probs of them. ``rollout_logp``: [P, K] the rollout's log-probs (``-inf`` where
    its top-k/top-p cut a token; None when only ``behaviour`` is known); ``rollout_ids``: [P, K] the
    token id of each of its columns (``-1``: padding), None when K = V and column j is token j."""
    learner_logp = learner_logp.float()
    learner_sampled = learner_logp.gather(-1, sampled[:, None]).squeeze(-1)
    diff = (behaviour.float() - learner_sampled).abs()
    reasons = []
    kl = overlap = None
    kl_top = 0
    if rollout_logp is not None:
        r = rollout_logp.double()
        if rollout_ids is None:
            ids, listed = None, torch.isfinite(r)
            lrn = learner_logp.double()
        else:
            ids, listed = rollout_ids.clamp(min=0), (rollout_ids >= 0) & torch.isfinite(r)
            lrn = learner_logp.double().gather(-1, ids)
            kl_top = int((rollout_ids >= 0).sum(-1).min())  # k; a row with the sampled token outside has k + 1
        p = torch.where(listed, r.exp(), torch.zeros_like(r))
        per_position = torch.where(listed, p * (r - lrn), torch.zeros_like(r)).sum(-1)  # [P]
        if ids is not None:  # the tokens not listed, as one outcome on each side
            rest_r = 1 - p.sum(-1)
            rest_l = (1 - torch.where(listed, lrn.exp(), torch.zeros_like(r)).sum(-1)).clamp(min=1e-300)
            # Below 1e-6 the remainder is the float32 log-probs' rounding, not mass the rollout left out.
            per_position += torch.where(rest_r > 1e-6, rest_r * (rest_r.clamp(min=1e-6).log() - rest_l.log()),
                                        torch.zeros_like(rest_r))
        kl = float(per_position.mean())
        k = min(th.k, r.shape[-1])
        top_r = r.topk(k, -1).indices
        top_r = top_r if ids is None else rollout_ids.gather(-1, top_r)
        top_l = learner_logp.topk(k, -1).indices
        overlap = float((top_r[:, :, None] == top_l[:, None, :]).any(-1).float().mean())
        if kl > th.kl:
            reasons.append(f"{'full-vocabulary' if ids is None else f'top-{kl_top} (a lower bound)'} KL "
                           f"{kl:.4f} > {th.kl}")
        if overlap < th.topk_overlap:
            reasons.append(f"top-{k} overlap {overlap:.2f} < {th.topk_overlap}")
    mean = float(diff.mean()) if diff.numel() else 0.0
    if mean > th.sampled_abs_diff_mean:
        reasons.append(f"sampled-token |diff| mean {mean:.4f} > {th.sampled_abs_diff_mean}")
    return Agreement(
        positions=int(diff.numel()), sampled_abs_diff_mean=mean,
        sampled_abs_diff_max=float(diff.max()) if diff.numel() else 0.0, kl=kl, topk_overlap=overlap,
        flagged=bool(reasons), reasons=reasons, kl_top=kl_top,
    )


__all__ = ["Agreement", "BF16_THRESHOLDS", "FP32_THRESHOLDS", "HALF_PRECISION", "Thresholds", "compare",
           "thresholds_for"]
