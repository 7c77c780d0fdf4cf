"""Pure RL algorithms of the learner: advantages, policy losses, loss
aggregation and KL estimators, each a registry of functions over tensors.

Nothing here touches DeepSpeed, the bus or the model; see engine.py for that.
"""

from rlvr.learner.algos.advantages import ADVANTAGES, AdvantageConfig, AdvantageName, compute_advantages
from rlvr.learner.algos.aggregation import AGGREGATIONS, AggregationMode, aggregate
from rlvr.learner.algos.kl import KL_ESTIMATORS, KLEstimator, kl_estimate
from rlvr.learner.algos.policy_loss import POLICY_LOSSES, LossInputs, LossOutputs, PolicyLossConfig, policy_loss

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "AdvantageConfig",
    "AdvantageName",
    "AggregationMode",
    "KLEstimator",
    "KL_ESTIMATORS",
    "LossInputs",
    "LossOutputs",
    "POLICY_LOSSES",
    "PolicyLossConfig",
    "aggregate",
    "compute_advantages",
    "kl_estimate",
    "policy_loss",
]
