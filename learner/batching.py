"""Pack training samples into micro-batches by token count and build tensors.

A step's samples differ a lot in length, so a fixed number of samples per
micro-batch either wastes memory on padding or runs out of it. Samples are
sorted longest first and packed greedily into micro-batches whose padded
size (rows x longest row) stays within ``micro_batch_tokens``. Packing is a
pure function of the lengths, so the same batch always gives the same
micro-batches (the exactly-once test compares weights bit for bit).

Rows are right-padded. Position t of the model's logits predicts token
t + 1, so every per-token tensor here is aligned with the *targets*
``input_ids[:, 1:]`` and has length T - 1.

Not covered: which samples form a batch (the learner actor) and what the
model does with the tensors (engine.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import msgspec
import torch


class TrainBatchItem(msgspec.Struct, frozen=True):
    """One scored completion, ready to train on."""

    prompt_ids: list[int]
    completion_ids: list[int]
    behaviour_logprobs: list[float]  # log π_behaviour of each completion token, from the rollout engine
    advantage: float
    sample_id: str


class TrainBatchEmptyError(ValueError):
    """A step was asked to train on no samples at all."""


class TrainItemMalformedError(ValueError):
    """A sample cannot be trained on: empty prompt or completion, or a
    behaviour log-prob count that differs from its token count."""


@dataclass(frozen=True)
class MicroBatch:
    input_ids: torch.Tensor  # [B, T] int64, right-padded
    attention_mask: torch.Tensor  # [B, T] int64
    loss_mask: torch.Tensor  # [B, T-1] bool: target is a completion token
    behaviour_logprobs: torch.Tensor  # [B, T-1] float32, 0 off the loss mask
    advantages: torch.Tensor  # [B] float32
    sample_ids: tuple[str, ...]

    @property
    def tokens(self) -> int:
        """Non-padding tokens (prompt and completion) in the micro-batch."""
        return int(self.attention_mask.sum())


def check_item(item: TrainBatchItem) -> None:
    if not item.prompt_ids:
        raise TrainItemMalformedError(f"{item.sample_id}: empty prompt (the first completion token needs a prefix)")
    if not item.completion_ids:
        raise TrainItemMalformedError(f"{item.sample_id}: empty completion")
    if len(item.behaviour_logprobs) != len(item.completion_ids):
        raise TrainItemMalformedError(
            f"{item.sample_id}: {len(item.behaviour_logprobs)} behaviour log-probs "
            f"for {len(item.completion_ids)} completion tokens"
        )


def pack_by_tokens(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Group sample indices so each group's rows x longest row <= max_tokens.

    Longest first, greedy; a sample longer than ``max_tokens`` alone in its
    group. Deterministic: ties keep the input order.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for i in order:
        # Sorted descending, so a group's longest row is its first.
        if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= max_tokens:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def build_micro_batch(items: Sequence[TrainBatchItem], pad_token_id: int) -> MicroBatch:
    rows = len(items)
    width = max(len(it.prompt_ids) + len(it.completion_ids) for it in items)
    input_ids = torch.full((rows, width), pad_token_id, dtype=torch.int64)
    attention = torch.zeros((rows, width), dtype=torch.int64)
    loss_mask = torch.zeros((rows, width - 1), dtype=torch.bool)
    behaviour = torch.zeros((rows, width - 1), dtype=torch.float32)
    for r, it in enumerate(items):
        p, c = len(it.prompt_ids), len(it.completion_ids)
        input_ids[r, : p + c] = torch.tensor(it.prompt_ids + it.completion_ids, dtype=torch.int64)
        attention[r, : p + c] = 1
        # Completion token j sits at position p + j and is predicted at p + j - 1.
        loss_mask[r, p - 1 : p + c - 1] = True
        behaviour[r, p - 1 : p + c - 1] = torch.tensor(it.behaviour_logprobs, dtype=torch.float32)
    return MicroBatch(
        input_ids=input_ids,
        attention_mask=attention,
        loss_mask=loss_mask,
        behaviour_logprobs=behaviour,
        advantages=torch.tensor([it.advantage for it in items], dtype=torch.float32),
        sample_ids=tuple(it.sample_id for it in items),
    )


def micro_batches(items: Sequence[TrainBatchItem], max_tokens: int, pad_token_id: int) -> list[MicroBatch]:
    """Validate, pack and tensorise a step's samples."""
    if not items:
        raise TrainBatchEmptyError("a training step needs at least one sample")
    for it in items:
        check_item(it)
    lengths = [len(it.prompt_ids) + len(it.completion_ids) for it in items]
    return [build_micro_batch([items[i] for i in g], pad_token_id) for g in pack_by_tokens(lengths, max_tokens)]


def sft_items(pairs: Sequence[tuple[list[int], list[int]]]) -> list[TrainBatchItem]:
    """(prompt, response) pairs as items; the loss mask covers the response only."""
    return [
        TrainBatchItem(list(p), list(r), [0.0] * len(r), 0.0, f"sft/{i}") for i, (p, r) in enumerate(pairs)
    ]


__all__ = [
    "MicroBatch",
    "TrainBatchEmptyError",
    "TrainBatchItem",
    "TrainItemMalformedError",
    "build_micro_batch",
    "check_item",
    "micro_batches",
    "pack_by_tokens",
    "sft_items",
]
