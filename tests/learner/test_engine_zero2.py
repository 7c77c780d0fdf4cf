"""The DeepSpeed engine on CPU under ZeRO-2 (gloo, one process), on a tiny
random Qwen2 built in the test: training moves the policy, SFT reduces its
loss, exported safetensors load in transformers with the same log-probs,
log-probs follow the sampling temperature, micro-batching does not change
the update, and a checkpoint restore continues bit for bit."""

import hashlib
import json
import math

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rlvr.learner.algos.policy_loss import PolicyLossConfig
from rlvr.learner.train.engine import TrainBatchItem
from rlvr.learner.engine_config import CosineSchedule
from tests.learner.engine_helpers import (
    VOCAB, assert_export_loads_with_engine_logprobs, batch, make_engine, weights,
)

# torch.distributed deprecation notices raised inside DeepSpeed
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def test_train_steps_raise_positive_and_lower_negative_advantage_completions(model_dir):
    engine = make_engine(model_dir)
    good, bad = [7, 8, 9, 10], [11, 12, 13, 14]
    items = [TrainBatchItem([1, 2], good, [-4.0] * 4, 1.0, "good"), TrainBatchItem([1, 2], bad, [-4.0] * 4, -1.0, "bad")]
    before = weights(engine)
    lp_good, lp_bad = sum(engine.logprobs([1, 2], good)), sum(engine.logprobs([1, 2], bad))
    for _ in range(4):
        metrics = engine.train_step(items)
    assert sum(engine.logprobs([1, 2], good)) > lp_good + 1.0
    assert sum(engine.logprobs([1, 2], bad)) < lp_bad - 1.0
    assert any(not torch.equal(before[k], v) for k, v in weights(engine).items())
    assert engine.step == 4 and metrics["samples"] == 2 and metrics["response_tokens"] == 8
    assert metrics["grad_norm"] > 0 and metrics["lr"] == pytest.approx(1e-2) and metrics["tokens_per_s"] > 0
    engine.close()


def test_sft_step_reduces_the_response_loss(model_dir):
    engine = make_engine(model_dir)
    pairs = [([1, 2, 3], [10, 11, 12, 13]), ([4, 5], [20, 21, 22]), ([6], [30, 31])]
    losses = [engine.sft_step(pairs)["loss"] for _ in range(8)]
    assert losses[0] == pytest.approx(math.log(VOCAB), abs=0.5)  # a random model starts near uniform
    assert losses[-1] < 0.5 * losses[0]
    engine.close()


def test_logprobs_at_temperature_equal_log_softmax_of_scaled_logits(model_dir):
    engine = make_engine(model_dir, temperature=0.7)
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompt, completion = [1, 2, 3], [4, 5, 6, 7]
    with torch.no_grad():
        logits = reference(torch.tensor([prompt + completion])).logits[0].float()
    targets = torch.tensor(completion)
    expected = torch.log_softmax(logits[2:-1] / 0.7, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    got = torch.tensor(engine.logprobs(prompt, completion))
    assert torch.allclose(got, expected, atol=1e-5)
    t1 = torch.log_softmax(logits[2:-1], dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    assert not torch.allclose(got, t1, atol=1e-3)  # the temperature matters
    engine.close()


def test_exported_safetensors_load_in_transformers_with_the_engines_logprobs(model_dir, tmp_path):
    engine = make_engine(model_dir, temperature=0.8)
    engine.train_step(batch(0))
    files = assert_export_loads_with_engine_logprobs(engine, model_dir, tmp_path / "w", temperature=0.8)
    assert [name for name, _, _ in files] == ["model.safetensors"]
    for name, digest, size in files:
        data = (tmp_path / "w" / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest and len(data) == size
    tensors = load_file(tmp_path / "w" / "model.safetensors")
    assert all(t.dtype == torch.float32 for t in tensors.values())
    engine.close()


def test_export_shards_carry_an_index(model_dir, tmp_path):
    engine = make_engine(model_dir, export_shard_bytes=20_000, export_dtype="bf16")
    files = engine.export_weights(tmp_path)
    names = [name for name, _, _ in files]
    assert len(names) > 2 and names[-1] == "model.safetensors.index.json"
    index = json.loads((tmp_path / names[-1]).read_text())
    assert set(index["weight_map"].values()) == set(names[:-1]) and "lm_head.weight" in index["weight_map"]
    assert load_file(tmp_path / names[0])[next(iter(index["weight_map"]))].dtype == torch.bfloat16
    engine.close()


def test_micro_batching_gives_the_same_update_as_one_batch(model_dir):
    one = make_engine(model_dir, micro_batch_tokens=10_000)
    many = make_engine(model_dir, micro_batch_tokens=16)
    m_one, m_many = one.train_step(batch(1)), many.train_step(batch(1))
    assert m_one["micro_batches"] == 1 and m_many["micro_batches"] >= 4
    assert m_one["loss"] == pytest.approx(m_many["loss"], abs=1e-6)
    # The gradient norm checks the accumulation's scaling (Adam's first update is
    # scale-free); the weights check its direction. Gradients that are zero in
    # exact arithmetic (e.g. k_proj biases, softmax is shift-invariant) hold
    # float noise that Adam amplifies, hence 1% of the lr.
    assert m_one["grad_norm"] == pytest.approx(m_many["grad_norm"], rel=1e-5)
    w_one, w_many = weights(one), weights(many)
    assert all(torch.allclose(w_one[k], w_many[k], atol=1e-4) for k in w_one)
    one.close()
    many.close()


def test_checkpoint_restore_continues_bit_for_bit(model_dir, tmp_path):
    schedule = CosineSchedule(total_steps=6, warmup_steps=2)
    loss = PolicyLossConfig(kl_coef=0.05)  # also exercises the reference model and its refresh
    uninterrupted = make_engine(model_dir, schedule=schedule, loss=loss, ref_update_every=2)
    for s in range(3):
        uninterrupted.train_step(batch(s))
    uninterrupted.save_checkpoint(tmp_path, {"consumer_seq": 42})
    after_save = torch.rand(3)
    tail = [uninterrupted.train_step(batch(s)) for s in range(3, 5)]

    restarted = make_engine(model_dir, schedule=schedule, loss=loss, ref_update_every=2)
    assert restarted.load_checkpoint(tmp_path) == {"consumer_seq": 42}
    assert restarted.step == 3 and torch.equal(torch.rand(3), after_save)  # RNG restored
    tail_again = [restarted.train_step(batch(s)) for s in range(3, 5)]
    assert [m["loss"] for m in tail] == [m["loss"] for m in tail_again]
    assert [m["lr"] for m in tail] == [m["lr"] for m in tail_again]
    a, b = weights(uninterrupted), weights(restarted)
    assert all(torch.equal(a[k], b[k]) for k in a)
    uninterrupted.close()
    restarted.close()


def test_bf16_with_gradient_checkpointing_trains_and_exports_bf16(model_dir, tmp_path):
    engine = make_engine(model_dir, bf16=True, gradient_checkpointing=True)
    first = engine.train_step(batch(0))
    assert engine.ds.module.model.embed_tokens.weight.dtype == torch.bfloat16
    assert math.isfinite(first["loss"]) and first["grad_norm"] > 0
    files = engine.export_weights(tmp_path)
    assert all(t.dtype == torch.bfloat16 for t in load_file(tmp_path / files[0][0]).values())
    engine.close()


def test_load_without_a_committed_checkpoint_returns_none(model_dir, tmp_path):
    engine = make_engine(model_dir)
    assert engine.load_checkpoint(tmp_path) is None
    engine.close()
