"""Each algorithm name a config may choose is exactly a key of the registry it selects from.

The config's ``Literal`` types are what a user can write (and what
``rlvr-actor config-doc`` lists); the registries are what runs. A name added
to one and not the other would either be refused by the config or fail at the
first step with a KeyError.
"""

from __future__ import annotations

import typing

import pytest

from rlvr.learner.algos.advantages import ADVANTAGES
from rlvr.learner.algos.aggregation import AGGREGATIONS
from rlvr.learner.algos.config import AggregationMode, GroupAdvantageName, KLEstimator, PolicyLossConfig
from rlvr.learner.algos.kl import KL_ESTIMATORS
from rlvr.learner.algos.policy_loss import POLICY_LOSSES


@pytest.mark.parametrize(
    "literal, registry",
    [
        (GroupAdvantageName, ADVANTAGES),  # "gae", the other name, runs in the engine (critic.py)
        (AggregationMode, AGGREGATIONS),
        (KLEstimator, KL_ESTIMATORS),
        (typing.get_type_hints(PolicyLossConfig)["name"], POLICY_LOSSES),
    ],
    ids=["advantages", "aggregation", "kl", "policy_loss"],
)
def test_config_literal_equals_registry_keys(literal, registry):
    assert set(typing.get_args(literal)) == set(registry)
