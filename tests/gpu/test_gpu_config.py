"""The CPU-checkable part of the GPU checks: the `up` config they run is valid."""

from __future__ import annotations

import msgspec

from rlvr.cli.run_config import Config
from tests.gpu.test_gpu_check import up_config


def test_the_gpu_checks_up_config_validates(tmp_path):
    cfg = msgspec.convert(up_config(tmp_path / "model"), Config)
    assert cfg.learn.steps == 3 and cfg.rollout.engine.model == cfg.learn.engine.model_path == str(tmp_path / "model")
