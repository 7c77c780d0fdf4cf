"""The DeepSpeed engine on CPU under ZeRO-3, where parameters are partitioned
and plain ``state_dict()`` is empty: training moves the policy, the
consolidated export loads in transformers with the engine's log-probs, and
a checkpoint restore continues bit for bit."""

import pytest
import torch

from rlvr.learner.train.engine import LearnerEngine, TrainBatchItem
from rlvr.learner.engine_config import CosineSchedule, OptimizerConfig, TrainEngineConfig
from tests.learner.engine_helpers import VOCAB, assert_export_loads_with_engine_logprobs

# torch.distributed deprecation notices raised inside DeepSpeed
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def make_engine(model_dir, **overrides) -> LearnerEngine:
    fields = dict(
        model_path=str(model_dir), zero_stage=3, micro_batch_tokens=24, temperature=0.9,
        optimizer=OptimizerConfig(lr=1e-2), schedule=CosineSchedule(total_steps=5, warmup_steps=1),
    )
    fields.update(overrides)
    return LearnerEngine(TrainEngineConfig(**fields), seed=0)


def batch(seed: int) -> list[TrainBatchItem]:
    gen = torch.Generator().manual_seed(seed)
    return [
        TrainBatchItem([1, 2 + i], torch.randint(0, VOCAB, (n,), generator=gen).tolist(), [-4.0] * n,
                       1.0 if i % 2 else -1.0, f"t{seed}/{i}")
        for i, n in enumerate([4, 8, 6, 3])
    ]


def test_zero3_trains_and_exports_consolidated_weights_that_match_its_logprobs(model_dir, tmp_path):
    engine = make_engine(model_dir)
    assert engine.ds.module.model.embed_tokens.weight.numel() == 0  # partitioned: plain state_dict() is empty
    good = [7, 8, 9, 10]
    before = sum(engine.logprobs([1, 3], good))
    initial = engine.full_state_dict()
    for s in range(3):
        metrics = engine.train_step(batch(s) + [TrainBatchItem([1, 3], good, [-4.0] * 4, 1.0, f"good{s}")])
    assert metrics["micro_batches"] >= 2 and metrics["grad_norm"] > 0
    assert sum(engine.logprobs([1, 3], good)) > before + 1.0
    trained = engine.full_state_dict()
    assert set(trained) == set(initial) and "lm_head.weight" in trained
    assert all(t.numel() > 0 for t in trained.values())  # gathered, not empty partitions
    assert any(not torch.equal(initial[k], trained[k]) for k in trained)

    assert_export_loads_with_engine_logprobs(engine, model_dir, tmp_path / "w", temperature=0.9)
    engine.close()


def test_zero3_checkpoint_restore_continues_bit_for_bit(model_dir, tmp_path):
    uninterrupted = make_engine(model_dir)
    for s in range(2):
        uninterrupted.train_step(batch(s))
    uninterrupted.save_checkpoint(tmp_path, {"consumed": ["a/0", "a/1"]})
    tail = [uninterrupted.train_step(batch(s))["loss"] for s in range(2, 4)]

    restarted = make_engine(model_dir)
    assert restarted.load_checkpoint(tmp_path) == {"consumed": ["a/0", "a/1"]}
    assert [restarted.train_step(batch(s))["loss"] for s in range(2, 4)] == tail
    a, b = uninterrupted.full_state_dict(), restarted.full_state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    uninterrupted.close()
    restarted.close()
