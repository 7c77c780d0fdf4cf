"""Sequence packing: the plan, the packed tensors, and packed == padded in
log-probs, every loss aggregation and gradients, on tiny random Llama and
Qwen2, and through a real DeepSpeed step."""

from __future__ import annotations

import math

import pytest
import torch
import transformers.masking_utils

from rlvr.learner.algos.aggregation import AGGREGATIONS
from rlvr.learner.algos.config import PolicyLossConfig
from rlvr.learner.algos.policy_loss import LossInputs, policy_loss
from rlvr.learner.train.batching import (
    TrainBatchItem,
    build_packed_micro_batch,
    micro_batches,
    pack_by_sum,
    pack_by_tokens,
)
from rlvr.learner.train.engine import PackingUnsupportedError
from rlvr.learner.train.token_logprobs import micro_batch_logprobs
from tests.learner.engine_helpers import batch, make_engine, weights
from tests.learner.test_token_logprobs import VOCAB, tiny_model

CPU = torch.device("cpu")


# ---- the plan ------------------------------------------------------------
def test_pack_by_sum_fills_rows_first_fit_longest_first():
    # lengths by index: 0:6 1:8 2:10 3:5 4:12 5:7; budget 20 tokens per row.
    # 12 -> row 0; 10 -> row 1; 8 -> row 0 (20); 7 -> row 1 (17); 6 -> row 2; 5 -> row 2.
    assert pack_by_sum([6, 8, 10, 5, 12, 7], 20) == [[4, 1], [2, 5], [0, 3]]


def test_a_sample_longer_than_the_budget_gets_its_own_row():
    assert pack_by_sum([3, 50, 3, 11], 10) == [[1], [3], [0, 2]]


def test_plan_is_deterministic_within_budget_and_never_longer_than_the_padded_plan():
    gen = torch.Generator().manual_seed(3)
    for trial in range(50):
        lengths = torch.randint(1, 80, (int(torch.randint(1, 120, (1,), generator=gen)),), generator=gen).tolist()
        budget = int(torch.randint(16, 256, (1,), generator=gen))
        groups = pack_by_sum(lengths, budget)
        assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
        assert all(sum(lengths[i] for i in g) <= budget or len(g) == 1 for g in groups)
        assert groups == pack_by_sum(list(lengths), budget)
        # learner/train/rank_commands.py evens out data-parallel passes with the padded count.
        assert len(groups) <= len(pack_by_tokens(lengths, budget)), (trial, lengths, budget)


# ---- the tensors ---------------------------------------------------------
def test_packed_row_restarts_positions_and_unpacks_to_the_per_sample_layout():
    items = [
        TrainBatchItem([5, 6], [7, 8, 9], [-0.1, -0.2, -0.3], 1.5, "a"),
        TrainBatchItem([4], [3], [-0.4], -0.5, "b"),
    ]
    mb = build_packed_micro_batch(items)
    assert mb.input_ids.tolist() == [[5, 6, 7, 8, 9, 4, 3]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1]]
    assert mb.sample_lengths == [5, 2] and mb.tokens == mb.computed_tokens == 7
    # Per-sample layout, as padded: target j of a sample is its token j + 1.
    assert mb.loss_mask.tolist() == [[False, True, True, True], [True, False, False, False]]
    assert mb.behaviour_logprobs[0, 1:].tolist() == pytest.approx([-0.1, -0.2, -0.3])
    # Row targets 0..5; target 4 (token 9 -> 4) crosses samples and is dropped.
    row = torch.arange(6, dtype=torch.float32).unsqueeze(0) + 10
    assert mb.unpack(row).tolist() == [[10, 11, 12, 13], [15, 0, 0, 0]]


# ---- packed == padded on real models ---------------------------------------
def varied_items(seed: int) -> list[TrainBatchItem]:
    """Eight samples from 2 to 41 tokens."""
    gen = torch.Generator().manual_seed(seed)
    items = []
    for i, (p, c) in enumerate([(1, 1), (3, 38), (5, 2), (2, 17), (9, 24), (1, 6), (4, 11), (6, 30)]):
        prompt = torch.randint(1, VOCAB, (p,), generator=gen).tolist()
        completion = torch.randint(1, VOCAB, (c,), generator=gen).tolist()
        behaviour = (-math.log(VOCAB) + 0.5 * torch.randn(c, generator=gen)).tolist()
        items.append(TrainBatchItem(prompt, completion, behaviour, float(i % 3) - 1.0, f"s{i}"))
    return items


def run_step(model, ref, items, *, packed: bool, budget: int, loss_cfg: PolicyLossConfig):
    """The engine's step for one layout: per-sample log-probs and entropy,
    the summed micro-batch losses and the parameters' gradients."""
    model.zero_grad(set_to_none=True)
    mbs = micro_batches(items, budget, 0, packed=packed)
    num_tokens = float(sum(int(mb.loss_mask.sum()) for mb in mbs))
    num_sequences = float(sum(int((mb.loss_mask.sum(-1) > 0).sum()) for mb in mbs))
    per_sample, total = {}, 0.0
    for mb in mbs:
        logp, entropy = micro_batch_logprobs(model, mb, 0.8, CPU, with_entropy=True, chunk_tokens=16)
        with torch.no_grad():
            ref_logp, _ = micro_batch_logprobs(ref, mb, 0.8, CPU)
        # π_old a little off π, the same per sample in both layouts, so ratios and clips move.
        # A function of the target's index only: layouts differ in width.
        shift = torch.stack([0.3 * torch.sin(torch.arange(logp.shape[1]) + int(s[1:])) for s in mb.sample_ids])
        out = policy_loss(LossInputs(
            logprobs=logp, old_logprobs=logp.detach() + shift, behaviour_logprobs=mb.behaviour_logprobs,
            advantages=mb.advantages, mask=mb.loss_mask, ref_logprobs=ref_logp, entropy=entropy,
            num_tokens=num_tokens, num_sequences=num_sequences,
        ), loss_cfg)
        out.loss.backward()
        total += float(out.loss.detach())
        for r, sid in enumerate(mb.sample_ids):
            m = mb.loss_mask[r]
            per_sample[sid] = (logp[r][m].detach(), entropy[r][m], out.metrics)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return per_sample, total, grads, len(mbs)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("aggregation", sorted(AGGREGATIONS))
def test_packed_matches_padded_in_logprobs_loss_and_gradients(arch, attn, aggregation):
    model, ref = tiny_model(arch, torch.float32), tiny_model(arch, torch.float32)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.set_attn_implementation(attn)
    ref.set_attn_implementation(attn)
    cfg = PolicyLossConfig(aggregation=aggregation, norm_length=48, kl_coef=0.1, dual_clip_c=3.0, tis_cap=2.0,
                           eps_low=0.1, eps_high=0.1)
    items = varied_items(0)
    padded, padded_loss, padded_grads, n_padded = run_step(model, ref, items, packed=False, budget=96, loss_cfg=cfg)
    packed, packed_loss, packed_grads, n_packed = run_step(model, ref, items, packed=True, budget=96, loss_cfg=cfg)
    assert n_packed < n_padded  # the layouts really group differently
    assert packed.keys() == padded.keys()
    for sid, (logp, entropy, _) in padded.items():
        torch.testing.assert_close(packed[sid][0], logp, atol=1e-5, rtol=0)
        torch.testing.assert_close(packed[sid][1], entropy, atol=1e-5, rtol=0)
    assert packed_loss == pytest.approx(padded_loss, rel=1e-5, abs=1e-7)
    assert packed_grads.keys() == padded_grads.keys() and padded_grads
    for name, g in padded_grads.items():
        err = (packed_grads[name] - g).abs().max() / g.abs().max().clamp_min(1e-12)
        assert err <= 1e-5, f"{name}: relative gradient error {err:.2e}"


def test_one_micro_batch_metrics_match_when_grouped_alike():
    # With the whole batch in one micro-batch the per-micro-batch metrics
    # (clip fractions, IS ratios, KL, entropy) are over the same tokens.
    model = ref = tiny_model("qwen2", torch.float32)  # KL 0: the metric path is what is compared
    cfg = PolicyLossConfig(kl_coef=0.1)
    items = varied_items(1)
    padded, *_ = run_step(model, ref, items, packed=False, budget=1 << 20, loss_cfg=cfg)
    packed, *_ = run_step(model, ref, items, packed=True, budget=1 << 20, loss_cfg=cfg)
    pm, km = padded["s0"][2], packed["s0"][2]
    assert pm.keys() == km.keys()
    for key in pm:
        assert km[key] == pytest.approx(pm[key], rel=1e-5, abs=1e-6), key


# ---- the engine ----------------------------------------------------------
def test_deepspeed_step_packed_equals_padded(model_dir):
    packed = make_engine(model_dir, temperature=0.9, pack_sequences=True)
    padded = make_engine(model_dir, temperature=0.9, pack_sequences=False)
    try:
        assert packed.cfg.pack_sequences
        items = batch(0)
        out_packed, out_padded = packed.train_step(items), padded.train_step(items)
        assert out_packed["padding_fraction"] == 0.0 < out_padded["padding_fraction"]
        assert out_packed["tokens"] == out_padded["tokens"]
        assert out_packed["micro_batches"] <= out_padded["micro_batches"]
        for key in ("loss", "grad_norm", "entropy", "ratio_mean", "tis_mean"):
            assert out_packed[key] == pytest.approx(out_padded[key], rel=1e-5, abs=1e-7), key
        # AdamW's first step is lr * g / (|g| + eps): a weight whose gradient is
        # near 0 moves by an amount that rounding decides, so within 1% of lr.
        wa, wb = weights(packed), weights(padded)
        for name, w in wb.items():
            torch.testing.assert_close(wa[name], w, atol=1e-4, rtol=0)
        prompt, completion = [1, 2, 3], [9, 8, 7, 6]
        assert packed.logprobs(prompt, completion) == pytest.approx(padded.logprobs(prompt, completion), abs=1e-5)
    finally:
        packed.close()
        padded.close()


def test_engine_refuses_packing_when_attention_leaks_across_samples(model_dir, monkeypatch):
    # A transformers that no longer detects packed rows attends across samples.
    monkeypatch.setattr(transformers.masking_utils, "find_packed_sequence_indices", lambda position_ids: None)
    with pytest.raises(PackingUnsupportedError, match="pack_sequences"):
        make_engine(model_dir, pack_sequences=True)
