"""Pack training samples into micro-batches by token count and build tensors.

A step's samples differ a lot in length, so a fixed number of samples per
micro-batch either wastes memory on padding or runs out of it. Two layouts,
both pure functions of the lengths, so the same batch always gives the same
micro-batches (the exactly-once test compares weights bit for bit):

- padded (``pack_by_tokens``, ``build_micro_batch``): samples sorted longest
  first, grouped greedily so rows x longest row <= ``micro_batch_tokens``,
  one right-padded row per sample.
- packed (``pack_by_sum``, ``build_packed_micro_batch``): first-fit
  decreasing into groups whose token *sum* is <= ``micro_batch_tokens``;
  a group is one row of its samples concatenated, with no padding at all.
  ``position_ids`` restart at 0 for each sample and the model is called with
  ``attention_mask=None``: transformers (5.x, ``masking_utils.
  find_packed_sequence_indices``) then keeps attention within each sample
  (sdpa and eager build a block-causal mask; flash-attention turns the same
  position_ids into sequence boundaries). The packed plan never has more
  groups than the padded plan of the same lengths (``pack_by_sum``), which
  is what learner/train/rank_commands.py counts to even out data-parallel passes.

Position t of the model's logits predicts token t + 1. Every per-token
tensor of a micro-batch (loss mask, behaviour log-probs, and the log-probs
the engine computes) is in the *per-sample* layout [B, T-1], aligned with
each sample's targets ``ids[1:]``, T the longest sample, whatever the layout
of the model's input: a packed micro-batch maps the row's per-target values
back with ``MicroBatch.unpack``, so the losses, their aggregations, KL and
entropy see exactly the tensors of the padded layout.

Not covered: which samples form a batch (the learner actor) and what the
model does with the tensors (engine.py).
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import msgspec
import torch

if TYPE_CHECKING:
    from rlvr.protocol import Sample


class TrainBatchItem(msgspec.Struct, frozen=True):
    """One scored completion, ready to train on."""

    prompt_ids: list[int]
    completion_ids: list[int]
    behaviour_logprobs: list[float]  # log π_behaviour of each completion token, from the rollout engine
    advantage: float
    sample_id: str
    # A multi-turn episode's loss mask (Completion.mask): 1 on the policy's tokens, 0 on the
    # environment's, which never count (loss, KL, entropy, denominators). Empty: all the policy's.
    completion_mask: list[int] = []
    # Token-level credit (process rewards, per-turn rewards: learner/algos/process.py): one
    # advantage per completion token, in place of ``advantage``. Empty: ``advantage`` everywhere.
    token_advantages: list[float] = []
    # PPO with a critic (``advantage.name = "gae"``): the sample's reward, placed on its last policy
    # token for GAE (learner/algos/gae.py); ``advantage`` is then unused.
    reward: float = 0.0

    def targets(self) -> list[bool]:
        """Which completion tokens the loss covers."""
        return [bool(m) for m in self.completion_mask] if self.completion_mask else [True] * len(self.completion_ids)

    def behaviour(self) -> list[float]:
        """Behaviour log-probs, 0.0 where the environment wrote the token (never read, never stored)."""
        if not self.completion_mask:
            return list(self.behaviour_logprobs)
        return [lp if m else 0.0 for lp, m in zip(self.behaviour_logprobs, self.completion_mask, strict=True)]


class TrainBatchEmptyError(ValueError):
    """A step was asked to train on no samples at all."""


class TrainItemMalformedError(ValueError):
    """A sample cannot be trained on: empty prompt or completion, or a
    behaviour log-prob count that differs from its token count."""


@dataclass(frozen=True)
class MicroBatch:
    input_ids: torch.Tensor  # [R, W] int64, the model's rows: R = B right-padded, or R = 1 packed
    attention_mask: torch.Tensor  # [R, W] int64, 1 on real tokens
    loss_mask: torch.Tensor  # [B, T-1] bool: target is a completion token
    behaviour_logprobs: torch.Tensor  # [B, T-1] float32, 0 off the loss mask
    # [B] float32: one per sample; or [B, T-1] float32 per target (0 off the loss mask) when an
    # item of the micro-batch carries token advantages. The loss takes either.
    advantages: torch.Tensor
    sample_ids: tuple[str, ...]
    # Packed only: [1, W] int64 positions, restarting at 0 for each sample
    # (None: padded rows, the model numbers positions itself).
    position_ids: torch.Tensor | None = None
    rewards: torch.Tensor | None = None  # [B] float32: each item's ``reward`` (GAE's outcome reward)

    @property
    def tokens(self) -> int:
        """Non-padding tokens (prompt and completion) in the micro-batch."""
        return int(self.attention_mask.sum())

    @property
    def computed_tokens(self) -> int:
        """Positions the model runs over, padding included."""
        return self.input_ids.numel()

    @property
    def sample_lengths(self) -> list[int]:
        """Each sample's own length (prompt + completion), in sample order."""
        if self.position_ids is None:
            return [int(n) for n in self.attention_mask.sum(-1).tolist()]
        starts = (self.position_ids[0] == 0).nonzero().squeeze(-1).tolist() + [self.position_ids.shape[1]]
        return [b - a for a, b in zip(starts, starts[1:])]

    def unpack(self, per_target: torch.Tensor) -> torch.Tensor:
        """Per-target values of the model's rows [R, W-1] in the per-sample
        layout [B, T-1], 0 past each sample's end; the identity when padded.
        Differentiable: the gradient flows back to the packed positions."""
        if self.position_ids is None:
            return per_target
        lengths = torch.tensor(self.sample_lengths)  # [B]
        starts = torch.cumsum(lengths, 0) - lengths  # [B]: row offset of each sample
        steps = torch.arange(self.loss_mask.shape[1])  # [T-1]
        valid = steps.unsqueeze(0) < (lengths - 1).unsqueeze(1)  # [B, T-1]
        # Target j of a sample is predicted at row position start + j.
        index = torch.where(valid, starts.unsqueeze(1) + steps.unsqueeze(0), 0).to(per_target.device)
        values = per_target[0][index]  # [B, T-1]
        return torch.where(valid.to(per_target.device), values, values.new_zeros(()))


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
    if item.token_advantages and (len(item.token_advantages) != len(item.completion_ids)
                                  or not all(math.isfinite(a) for a in item.token_advantages)):
        raise TrainItemMalformedError(
            f"{item.sample_id}: {len(item.token_advantages)} token advantages for {len(item.completion_ids)} "
            "completion tokens, or a non-finite one"
        )
    if item.completion_mask and (len(item.completion_mask) != len(item.completion_ids) or not any(item.completion_mask)):
        raise TrainItemMalformedError(
            f"{item.sample_id}: a loss mask of {len(item.completion_mask)} entries for "
            f"{len(item.completion_ids)} completion tokens, or with no policy token"
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


def pack_by_sum(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Group sample indices so each group's token sum <= max_tokens.

    First-fit decreasing: longest first, each into the first group with
    room; a sample longer than ``max_tokens`` alone in its group.
    Deterministic: ties keep the input order, as do groups' members.

    Never more groups than ``pack_by_tokens(lengths, max_tokens)``: that
    plan is consecutive runs of the same order, each a valid sum group;
    next-fit over that order keeps ahead of it run for run (a run's tail
    fits wherever its head did), and first fit never opens more groups
    than next fit (within one of next fit's runs it opens at most one).
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    loads: list[int] = []
    for i in order:
        n = lengths[i]
        slot = next((g for g, load in enumerate(loads) if load + n <= max_tokens), None)
        if slot is None:
            groups.append([i])
            loads.append(n)
        else:
            groups[slot].append(i)
            loads[slot] += n
    return groups


def _advantages(items: Sequence[TrainBatchItem], targets: int) -> torch.Tensor:
    """[B] when every item has one advantage; else [B, targets], each item's token
    advantages (or its one advantage) at its completion's target positions."""
    if not any(it.token_advantages for it in items):
        return torch.tensor([it.advantage for it in items], dtype=torch.float32)
    out = torch.zeros((len(items), targets), dtype=torch.float32)
    for r, it in enumerate(items):
        p, c = len(it.prompt_ids), len(it.completion_ids)
        out[r, p - 1 : p + c - 1] = torch.tensor(it.token_advantages, dtype=torch.float32) if it.token_advantages \
            else it.advantage
    return out


def build_packed_micro_batch(items: Sequence[TrainBatchItem]) -> MicroBatch:
    """One row: the samples concatenated, positions restarting at 0 for each."""
    rows = len(items)
    lengths = [len(it.prompt_ids) + len(it.completion_ids) for it in items]
    width = max(lengths)
    loss_mask = torch.zeros((rows, width - 1), dtype=torch.bool)
    behaviour = torch.zeros((rows, width - 1), dtype=torch.float32)
    for r, it in enumerate(items):
        p, c = len(it.prompt_ids), len(it.completion_ids)
        loss_mask[r, p - 1 : p + c - 1] = torch.tensor(it.targets(), dtype=torch.bool)
        behaviour[r, p - 1 : p + c - 1] = torch.tensor(it.behaviour(), dtype=torch.float32)
    ids = [t for it in items for t in it.prompt_ids + it.completion_ids]
    return MicroBatch(
        input_ids=torch.tensor([ids], dtype=torch.int64),
        attention_mask=torch.ones((1, len(ids)), dtype=torch.int64),
        loss_mask=loss_mask,
        behaviour_logprobs=behaviour,
        advantages=_advantages(items, width - 1),
        sample_ids=tuple(it.sample_id for it in items),
        rewards=torch.tensor([it.reward for it in items], dtype=torch.float32),
        position_ids=torch.cat([torch.arange(n, dtype=torch.int64) for n in lengths]).unsqueeze(0),
    )


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
        # Completion token j sits at position p + j and is predicted at p + j - 1;
        # an environment's token (mask 0) is context, never a target.
        loss_mask[r, p - 1 : p + c - 1] = torch.tensor(it.targets(), dtype=torch.bool)
        behaviour[r, p - 1 : p + c - 1] = torch.tensor(it.behaviour(), dtype=torch.float32)
    return MicroBatch(
        input_ids=input_ids,
        attention_mask=attention,
        loss_mask=loss_mask,
        behaviour_logprobs=behaviour,
        advantages=_advantages(items, width - 1),
        sample_ids=tuple(it.sample_id for it in items),
        rewards=torch.tensor([it.reward for it in items], dtype=torch.float32),
    )


def micro_batches(
    items: Sequence[TrainBatchItem], max_tokens: int, pad_token_id: int, *, packed: bool = False
) -> list[MicroBatch]:
    """Validate, group and tensorise a step's samples: packed rows, or right-padded ones."""
    if not items:
        raise TrainBatchEmptyError("a training step needs at least one sample")
    for it in items:
        check_item(it)
    plan = micro_batch_plan(items, max_tokens, packed=packed)
    if packed:
        return [build_packed_micro_batch([items[i] for i in g]) for g in plan]
    return [build_micro_batch([items[i] for i in g], pad_token_id) for g in plan]


def micro_batch_plan(items: Sequence[TrainBatchItem], max_tokens: int, *, packed: bool = False) -> list[list[int]]:
    """Which samples share each micro-batch (indices into ``items``): token
    sums for packed rows, rows x longest row for padded ones. Data-parallel
    ranks count their passes with it too (rank_commands.shard_train)."""
    lengths = [len(it.prompt_ids) + len(it.completion_ids) for it in items]
    return pack_by_sum(lengths, max_tokens) if packed else pack_by_tokens(lengths, max_tokens)


def sample_items(sample: Sample, advantage: float, token_advantages: Sequence[float] = ()) -> list[TrainBatchItem]:
    """A scored sample's training sequences: its own prompt and completion, then each segment of an
    agent's episode (``Episode.segments``) as a sequence of its own, ``<sample_id>#segment-<k>``, with
    its own loss mask and the episode's ``advantage`` (token advantages, when given, belong to the
    sample's own completion: its episode's turns index it). Custody stays per Sample: the items of one
    sample are trained, or dropped, together."""
    items = [TrainBatchItem(sample.prompt_ids, sample.completion.ids, sample.completion.logprobs, advantage,
                            sample.sample_id, sample.completion.mask, token_advantages=list(token_advantages))]
    for k, seg in enumerate(sample.episode.segments if sample.episode is not None else []):
        items.append(TrainBatchItem(seg.prompt_ids, seg.completion.ids, seg.completion.logprobs, advantage,
                                    f"{sample.sample_id}#segment-{k + 1}", seg.completion.mask))
    return items


def sft_items(pairs: Sequence[tuple]) -> list[TrainBatchItem]:
    """(prompt, response) pairs as items; the loss mask covers the response only. A
    (prompt, response, mask) triple is a multi-turn transcript: only its 1s are targets."""
    return [
        TrainBatchItem(list(p[0]), list(p[1]), [0.0] * len(p[1]), 0.0, f"sft/{i}", list(p[2]) if len(p) > 2 else [])
        for i, p in enumerate(pairs)
    ]


__all__ = [
    "MicroBatch",
    "TrainBatchEmptyError",
    "TrainBatchItem",
    "TrainItemMalformedError",
    "build_micro_batch",
    "build_packed_micro_batch",
    "check_item",
    "micro_batch_plan",
    "micro_batches",
    "pack_by_sum",
    "pack_by_tokens",
    "sample_items",
    "sft_items",
]
