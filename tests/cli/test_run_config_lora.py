"""A LoRA learner with a vLLM rollout: the run config must let vLLM serve
the adapter's rank, and says which key to set when it does not."""

from __future__ import annotations

import pytest

from rlvr.actors.config import ConfigError
from rlvr.cli.run_config import load_config

CONFIG = """
run = "lora"
[rollout.engine]
kind = "vllm"
model = "m"
{rank_line}
[learn.engine]
model_path = "m"
[learn.engine.lora]
enabled = true
rank = 16
"""


@pytest.mark.parametrize("rank_line", ["", "max_lora_rank = 8"])
def test_vllm_rollout_without_room_for_the_adapter_rank_names_the_key(tmp_path, rank_line):
    path = tmp_path / "run.toml"
    path.write_text(CONFIG.format(rank_line=rank_line))
    with pytest.raises(ConfigError, match=r"rollout\.engine\.max_lora_rank >= 16"):
        load_config(path)


def test_vllm_rollout_with_room_for_the_adapter_rank_loads(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(CONFIG.format(rank_line="max_lora_rank = 16"))
    cfg = load_config(path)
    assert cfg.learn.engine.lora.enabled and cfg.rollout.engine.max_lora_rank == 16


def test_unknown_lora_key_is_named(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(CONFIG.format(rank_line="max_lora_rank = 16") + "ranks = 3\n")
    with pytest.raises(ConfigError, match=r"ranks.*\$\.learn\.engine\.lora"):
        load_config(path)
