"""Packing samples into micro-batches by token count, and the tensors built from them."""

import pytest
import torch

from rlvr.learner.train.batching import (
    TrainBatchEmptyError,
    TrainBatchItem,
    TrainItemMalformedError,
    build_micro_batch,
    micro_batches,
    pack_by_tokens,
    sft_items,
)


def test_pack_longest_first_within_the_token_budget():
    # lengths by index: 0:6 1:8 2:10 3:5 4:12 5:7; budget 32 padded tokens.
    # [12, 10] -> 2 x 12 = 24 (a third row would make 36); [8, 7, 6, 5] -> 4 x 8 = 32.
    assert pack_by_tokens([6, 8, 10, 5, 12, 7], 32) == [[4, 2], [1, 5, 0, 3]]


def test_sample_longer_than_the_budget_gets_its_own_micro_batch():
    assert pack_by_tokens([3, 50, 3], 10) == [[1], [0, 2]]


def test_every_micro_batch_respects_the_budget_and_every_sample_appears_once():
    gen = torch.Generator().manual_seed(7)
    lengths = torch.randint(1, 40, (200,), generator=gen).tolist()
    groups = pack_by_tokens(lengths, 64)
    assert sorted(i for g in groups for i in g) == list(range(200))
    assert all(len(g) * max(lengths[i] for i in g) <= 64 for g in groups)
    assert groups == pack_by_tokens(lengths, 64)  # deterministic


def test_tensors_align_with_the_shifted_targets():
    items = [
        TrainBatchItem([5, 6], [7, 8, 9], [-0.1, -0.2, -0.3], 1.5, "a"),
        TrainBatchItem([4], [3], [-0.4], -0.5, "b"),
    ]
    mb = build_micro_batch(items, pad_token_id=0)
    assert mb.input_ids.tolist() == [[5, 6, 7, 8, 9], [4, 3, 0, 0, 0]]
    assert mb.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    # Target t is input t + 1: completion tokens of "a" are targets 1..3, of "b" target 0.
    assert mb.loss_mask.tolist() == [[False, True, True, True], [True, False, False, False]]
    assert torch.allclose(mb.behaviour_logprobs, torch.tensor([[0.0, -0.1, -0.2, -0.3], [-0.4, 0, 0, 0]]))
    assert mb.advantages.tolist() == [1.5, -0.5] and mb.sample_ids == ("a", "b") and mb.tokens == 7


@pytest.mark.parametrize(
    "item",
    [
        TrainBatchItem([], [1], [0.0], 0.0, "no-prompt"),
        TrainBatchItem([1], [], [], 0.0, "no-completion"),
        TrainBatchItem([1], [2, 3], [0.0], 0.0, "short-logprobs"),
    ],
)
def test_malformed_items_are_rejected_by_name(item):
    with pytest.raises(TrainItemMalformedError, match=item.sample_id):
        micro_batches([item], 64, 0)


def test_sft_items_mask_the_response_only():
    (mb,) = micro_batches(sft_items([([1, 2, 3], [4, 5])]), 64, 0)
    assert mb.loss_mask.tolist() == [[False, False, True, True]]


def test_an_empty_batch_is_an_error():
    with pytest.raises(TrainBatchEmptyError):
        micro_batches([], 64, 0)
