"""Pure RL algorithms of the learner: advantages, policy losses, loss
aggregation and KL estimators, each a registry of functions over tensors.

Nothing here touches DeepSpeed, the bus or the model; see engine.py for that.
Import the modules themselves (``rlvr.learner.algos.advantages`` ...): this
package re-exports nothing, so that ``rlvr.learner.algos.config`` (the typed
config every role decodes) imports without torch.
"""
