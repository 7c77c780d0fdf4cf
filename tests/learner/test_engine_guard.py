"""The engine's guard: a non-finite loss never moves the weights."""

import math

import pytest
import torch

from rlvr.learner.train.engine import TrainBatchItem
from tests.learner.engine_helpers import batch, make_engine, weights

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def _poisoned(seed: int) -> list[TrainBatchItem]:
    items = batch(seed)
    bad = items[1]
    # A NaN behaviour log-prob (one that got past validation) makes the TIS weight, and the loss, NaN.
    items[1] = TrainBatchItem(bad.prompt_ids, bad.completion_ids, [math.nan] * len(bad.completion_ids),
                              bad.advantage, bad.sample_id)
    return items


@pytest.mark.parametrize("zero_stage", [0, 2])
def test_a_non_finite_loss_skips_the_step_counts_it_and_leaves_the_weights_as_they_were(model_dir, zero_stage):
    engine = make_engine(model_dir, zero_stage=zero_stage)
    before = weights(engine)
    metrics = engine.train_step(_poisoned(0))
    after = weights(engine)
    assert metrics["step_skipped"] == 1.0 and metrics["skipped_steps_nonfinite_loss"] == 1.0
    assert engine.skipped_steps == {"nonfinite_loss": 1}
    assert all(torch.equal(before[k], after[k]) for k in before), "a skipped step moved the weights"
    # The next good batch trains normally: finite weights that moved.
    metrics = engine.train_step(batch(1))
    moved = weights(engine)
    assert metrics["step_skipped"] == 0.0 and math.isfinite(metrics["grad_norm"])
    assert all(torch.isfinite(v).all() for v in moved.values())
    assert any(not torch.equal(after[k], moved[k]) for k in after)
    engine.close()
