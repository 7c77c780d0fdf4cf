"""A policy version in memory (learner/weights/snapshot.py): the copy the collective sends, and the
buffers it reuses once nothing holds a version any more."""

from __future__ import annotations

import gc

import torch

from rlvr.learner.weights.snapshot import ExportPlan, Snapshot, SnapshotPool, take_snapshot

EMBED, HEAD = "model.embed_tokens.weight", "lm_head.weight"


def _state(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    embed = torch.randn(6, 4, generator=g)
    return {EMBED: embed, HEAD: embed, "model.norm.weight": torch.randn(4, generator=g), "ids": torch.arange(3)}


def _snapshot(pool: SnapshotPool, seed: int, tmp_path) -> Snapshot:
    tensors = take_snapshot(_state(seed), torch.bfloat16, tied=True, pool=pool)
    snap = Snapshot(seed, seed, True, tensors, ExportPlan(tmp_path, "bf16"))
    pool.watch(snap)
    return snap


def test_a_snapshot_is_a_private_copy_in_the_export_dtype_with_the_tied_head_shared():
    state = _state(0)
    copy = take_snapshot(state, torch.bfloat16, tied=True)
    assert list(copy) == sorted(state)
    assert copy[EMBED].dtype == torch.bfloat16 and copy["ids"].dtype == torch.int64
    assert copy[HEAD] is copy[EMBED]  # one copy under both names
    assert torch.equal(copy[EMBED], state[EMBED].bfloat16())
    state[EMBED].add_(1.0)  # training goes on
    assert not torch.equal(copy[EMBED], state[EMBED].bfloat16())


def test_buffers_are_reused_only_once_nothing_holds_their_version(tmp_path):
    pool = SnapshotPool()
    v1 = _snapshot(pool, 1, tmp_path)
    v1_ptr = v1.tensors["model.norm.weight"].data_ptr()
    sent = [v1]  # a sender still has v1 in hand
    v2 = _snapshot(pool, 2, tmp_path)
    assert v2.tensors["model.norm.weight"].data_ptr() != v1_ptr
    del v1
    gc.collect()
    v3 = _snapshot(pool, 3, tmp_path)  # v1 is still held: new memory again
    assert v1_ptr not in {v3.tensors["model.norm.weight"].data_ptr()}
    sent.clear()  # the sender let v1 go
    v4 = _snapshot(pool, 4, tmp_path)
    assert v4.tensors["model.norm.weight"].data_ptr() == v1_ptr
    assert torch.equal(v4.tensors["model.norm.weight"], _state(4)["model.norm.weight"].bfloat16())
    assert v4.tensors[HEAD] is v4.tensors[EMBED]
    assert torch.equal(v2.tensors["model.norm.weight"], _state(2)["model.norm.weight"].bfloat16())  # untouched
