"""Typed TOML config: unknown keys and bad values are errors that name them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.cli.run_config import ConfigError, dump_config, load_config
from rlvr.cli.commands.up import builtin_config_path


def _toml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "run.toml"
    p.write_text(text)
    return p


def test_defaults_load_without_a_file():
    cfg = load_config(None)
    assert cfg.run == "demo" and cfg.verify.pool_size >= 1


def test_builtin_example_config_loads():
    cfg = load_config(builtin_config_path())
    assert cfg.run == "builtin"


def test_unknown_key_is_named(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(_toml(tmp_path, "[learn]\ngroup_sise = 8\n"))
    assert "group_sise" in str(e.value) and "$.learn" in str(e.value) and "run.toml" in str(e.value)


def test_bad_value_is_named(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(_toml(tmp_path, "[verify]\npool_size = 0\n"))
    assert "$.verify.pool_size" in str(e.value)


def test_unknown_engine_kind_is_named(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(_toml(tmp_path, '[rollout.engine]\nkind = "tgi"\n'))
    assert "tgi" in str(e.value) and "$.rollout.engine" in str(e.value)


def test_bad_run_id_is_an_error(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(_toml(tmp_path, 'run = "a.b"\n'))
    assert "$.run" in str(e.value)


def test_invalid_toml_says_so(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(_toml(tmp_path, "[learn\n"))
    assert "not valid TOML" in str(e.value)


def test_command_line_overrides_are_validated(tmp_path):
    cfg = load_config(None, overrides={"run": "r1", "nats.url": "nats://127.0.0.1:1"})
    assert cfg.run == "r1" and cfg.nats.url == "nats://127.0.0.1:1"
    with pytest.raises(ConfigError):
        load_config(None, overrides={"bus.max_deliver": 0})


def test_resolved_config_round_trips_through_json(tmp_path):
    cfg = load_config(builtin_config_path())
    p = tmp_path / "config.json"
    p.write_bytes(dump_config(cfg))
    assert load_config(p) == cfg
