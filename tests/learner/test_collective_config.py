"""Config of the collective weights transport: every mistake names its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.cli.run_config import ConfigError, load_config


def _load(tmp_path: Path, text: str):
    path = tmp_path / "run.toml"
    path.write_text(text)
    return load_config(path)


def test_a_collective_run_loads(tmp_path: Path):
    cfg = _load(tmp_path, '[learn]\nweights_transport = "nccl"\n[learn.collective]\naddress = "learner:29600"\n'
                          'backend = "gloo"\n[rollout.collective]\naddress = "learner:29600"\n')
    assert cfg.learn.collective.address == "learner:29600" and cfg.learn.collective.backend == "gloo"
    assert cfg.rollout.collective.join and cfg.rollout.collective.timeout_s == 60.0


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[learn]\nweights_transport = "nccl"\n', r"learn\.collective\.address"),
        ('[learn]\nweights_transport = "nccl"\n[learn.collective]\naddress = "learner"\n', r"learn\.collective\.address"),
        ('[learn]\nweights_transport = "nccl"\n[learn.collective]\naddress = "h:1"\nbackend = "mpi"\n',
         r"\$\.learn\.collective\.backend"),
        ('[learn]\nweights_transport = "nccl"\n[learn.collective]\naddress = "h:1"\ntimeout_s = 0\n',
         r"\$\.learn\.collective\.timeout_s"),
        ('[learn]\nweights_transport = "nccl"\n[learn.collective]\naddress = "h:1"\nport = 2\n',
         r"unknown field `port` - at `\$\.learn\.collective`"),
        ('[learn.collective]\naddress = "h:1"\n', r"learn\.collective is set but learn\.weights_transport"),
        ('[learn]\nweights_transport = "nccl"\n[learn.collective]\naddress = "h:1"\nbackend = "gloo"\n'
         'device = "cuda"\n', r"learn\.collective\.device"),
        ('[rollout.collective]\naddress = "h:99999"\n', r"rollout\.collective\.address"),
        ('[rollout.collective]\nbackend = "tcp"\n', r"\$\.rollout\.collective\.backend"),
    ],
)
def test_config_errors_name_the_key(tmp_path: Path, text: str, key: str):
    with pytest.raises(ConfigError, match=key):
        _load(tmp_path, text)
