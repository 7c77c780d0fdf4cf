"""The engine's typed config and LR schedule (no DeepSpeed needed)."""

import math

import msgspec
import pytest

from rlvr.learner.train.engine import deepspeed_config, lr_factor
from rlvr.learner.engine_config import ConstantSchedule, CosineSchedule, TrainEngineConfig


def test_unknown_keys_are_rejected_by_name():
    with pytest.raises(msgspec.ValidationError, match="zero_stag"):
        msgspec.convert({"model_path": "m", "zero_stag": 2}, TrainEngineConfig)
    with pytest.raises(msgspec.ValidationError, match="eps_hi"):
        msgspec.convert({"model_path": "m", "loss": {"eps_hi": 0.3}}, TrainEngineConfig)


def test_config_decodes_tagged_schedule_and_nested_loss():
    cfg = msgspec.convert(
        {
            "model_path": "m",
            "zero_stage": 3,
            "schedule": {"type": "cosine", "total_steps": 100, "warmup_steps": 10},
            "loss": {"aggregation": "seq-mean-token-sum-norm", "norm_length": 512, "dual_clip_c": 3.0},
        },
        TrainEngineConfig,
    )
    assert cfg.schedule == CosineSchedule(total_steps=100, warmup_steps=10)
    assert cfg.loss.norm_length == 512 and cfg.loss.eps_high == 0.28
    ds = deepspeed_config(cfg)
    assert ds["zero_optimization"]["stage"] == 3 and ds["managed_gradient_accumulation"] is False


def test_warmup_then_constant_or_cosine():
    assert [lr_factor(s, ConstantSchedule(warmup_steps=4)) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    cos = CosineSchedule(total_steps=12, warmup_steps=2, min_lr_ratio=0.1)
    assert lr_factor(0, cos) == 0.5 and lr_factor(2, cos) == 1.0
    assert lr_factor(7, cos) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_factor(12, cos) == pytest.approx(0.1) and lr_factor(50, cos) == pytest.approx(0.1)
