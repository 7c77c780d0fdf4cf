"""PPO epochs: several optimizer steps per batch against the cached π_old."""

from __future__ import annotations

from rlvr.learner.algos.config import PolicyLossConfig
from rlvr.learner.engine_config import OptimizerConfig
from tests.learner.engine_helpers import batch, make_engine


def test_two_epochs_take_two_optimizer_steps_and_the_second_is_clipped(model_dir):
    engine = make_engine(
        model_dir, ppo_epochs=2, optimizer=OptimizerConfig(lr=0.05),
        loss=PolicyLossConfig(eps_low=0.01, eps_high=0.01),
    )
    metrics = engine.train_step(batch(0))
    assert engine.step == 2 and metrics["ppo_epochs"] == 2.0
    # After a large first update the policy moved: the second epoch's ratio leaves [0.99, 1.01].
    assert metrics["clip_frac"] > 0.0 and metrics["ratio_mean"] != 1.0
    engine.close()


def test_one_epoch_keeps_the_ratio_at_one(model_dir):
    engine = make_engine(model_dir, ppo_epochs=1, optimizer=OptimizerConfig(lr=0.05))
    metrics = engine.train_step(batch(0))
    assert engine.step == 1 and metrics["clip_frac"] == 0.0 and metrics["ratio_mean"] == 1.0
    engine.close()
