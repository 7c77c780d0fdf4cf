"""`rlvr-actor up --set KEY=VALUE`: one config key from the command line, its value in TOML."""

from __future__ import annotations

import pytest

from rlvr.actors.config import ConfigError
from rlvr.cli.commands.up import builtin_config_path, parse_sets
from rlvr.cli.run_config import load_config


def test_values_are_toml_and_a_bare_word_is_a_string():
    assert parse_sets(["learn.steps=100", "learn.dataset.verifier={name=\"random\",params={p=0.3}}", "run=abc",
                       "learn.dynamic_sampling=false"]) == {
        "learn.steps": 100, "learn.dataset.verifier": {"name": "random", "params": {"p": 0.3}}, "run": "abc",
        "learn.dynamic_sampling": False}


def test_the_random_control_recipe_trains_on_random_rewards_and_keeps_the_true_verifier_for_held_out_rounds():
    from rlvr.learner.config import train_dataset
    from rlvr.learner.data.datasets import load_splits

    cfg = load_config(builtin_config_path(),
                      overrides=parse_sets(['learn.train_verifier={name="random",params={p=0.35}}']))
    assert train_dataset(cfg.learn).verifier.name == "random" and cfg.learn.dataset.verifier.name == "composite"
    train = load_splits(train_dataset(cfg.learn), seed=0).train
    held = load_splits(cfg.learn.dataset, seed=0).heldout
    assert train[0].verifier.name == "random" and held[0].verifier.name == "composite"
    with pytest.raises(ConfigError, match="train_verifier"):
        load_config(builtin_config_path(), overrides=parse_sets(["learn.train_verifier=3"]))


def test_a_bad_pair_or_a_bad_key_is_an_error_that_names_it():
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_sets(["learn.steps"])
    with pytest.raises(ConfigError, match="stepz"):
        load_config(builtin_config_path(), overrides=parse_sets(["learn.stepz=3"]))
