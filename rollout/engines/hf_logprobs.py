"""Behaviour log-probs of the tokens ``generate`` samples, read one step at a time.

The hf engine used to ask ``generate`` for ``output_scores``, which keeps every
step's processed scores ([B, V] float32 each) until the end, and then stacked
them into a [B, T, V] tensor: O(B x T x V) memory (B=256, T=1024, V=151k is
~159 GB, twice). ``SampledLogprobs`` is a logits processor that passes the
scores through unchanged and keeps only the last step's row; at the next
step the sampled token is the last column of ``input_ids``, so it stores
that token's log-prob ([B] floats) and drops the row. Memory: one extra
[B, V] row plus O(B x T) floats.

Placement matters. In transformers 5.x ``_get_logits_processor`` puts the
caller's processors *before* the warpers it builds from the generation
config (temperature, top-k, top-p), so a recorder handed in next to a
config with those set would see unwarped scores. ``sampling_processors``
therefore builds the warpers itself, from transformers' own classes and
under the conditions ``generate`` uses (temperature != 1, top-k != 0,
top-p < 1, ``min_tokens_to_keep=1``), with the recorder last; the caller's
``GenerationConfig`` must leave generate's warpers off (temperature 1 or
None, top_k 0, top_p None or 1). The scores reaching the recorder are the
float32 tensor ``generate`` samples from (it upcasts the logits before any
processor), so the log-probs are those of the processed distribution:
``log_softmax`` of the same row, as the old ``output_scores`` path computed.
Greedy gets no warpers: unscaled log-probs.

Rows that finished early carry the pad token from then on (``generate``
writes it into ``input_ids``), exactly as in ``sequences``; the engine cuts
them at EOS afterwards. If ``generate`` ran a step it later undid (its
deferred stop check, mps only), the surplus is dropped by ``logprobs``.

Not covered: beam search or assisted decoding (the engine uses neither).
"""

from __future__ import annotations

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)


class SampledLogprobs(LogitsProcessor):
    """Pass-through processor: the log-prob of each step's sampled token.

    One instance per ``generate`` call; it must be the last processor."""

    def __init__(self) -> None:
        self._row: torch.Tensor | None = None  # last step's processed scores [B, V], token not known yet
        self._steps: list[torch.Tensor] = []  # [B] per step whose token is known

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._row is not None:
            self._read(input_ids[:, -1])
        self._row = scores
        return scores

    def _read(self, tokens: torch.Tensor) -> None:
        lp = torch.log_softmax(self._row, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        self._steps.append(lp)
        self._row = None

    def logprobs(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """[B, T] log-probs of ``new_tokens`` ([B, T], the generated part of
        ``sequences``); reads the last step with its token from there."""
        t = new_tokens.shape[1]
        if self._row is not None and len(self._steps) < t:
            self._read(new_tokens[:, len(self._steps)])
        self._row = None
        if len(self._steps) < t:
            raise RuntimeError(f"{len(self._steps)} scored steps for {t} generated tokens")
        if t == 0:
            return torch.zeros(new_tokens.shape, dtype=torch.float32, device=new_tokens.device)
        return torch.stack(self._steps[:t], dim=1)


def sampling_processors(
    temperature: float, top_k: int, top_p: float, recorder: SampledLogprobs
) -> LogitsProcessorList:
    """Temperature, top-k, top-p (as ``generate`` would add them for sampling;
    temperature 0 is greedy: none), then ``recorder``."""
    procs: list[LogitsProcessor] = []
    if temperature > 0.0:
        if temperature != 1.0:
            procs.append(TemperatureLogitsWarper(temperature))
        if top_k > 0:
            procs.append(TopKLogitsWarper(top_k=top_k, min_tokens_to_keep=1))
        if top_p < 1.0:
            procs.append(TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=1))
    return LogitsProcessorList([*procs, recorder])


__all__ = ["SampledLogprobs", "sampling_processors"]
