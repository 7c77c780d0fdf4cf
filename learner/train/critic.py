"""PPO's critic as a value head on the policy (``[learn.engine.advantage] name = "gae"``).

Why a head and not a second model (docs/design.md, "Advantages"): the head is a submodule of the
policy, so the one DeepSpeed engine holds it, its AdamW state sits in the one optimizer (a
parameter group of its own, at ``critic.lr``), and the one checkpoint saves and restores it: the
critic resumes exactly once with the policy, with nothing to keep in step. It adds H + 1
parameters and their optimizer state, and the step one more forward pass (the old values and
log-probs, no gradient). The cost of sharing: the value loss also shapes the shared trunk,
weighed by ``critic.loss_coef``. A separate critic model (verl's and OpenRLHF's layout) is
``critic.kind = "separate"``, refused by the config today.

The head's parameters are named ``rlvr_value_head.*``: they are stripped from every export (the
rollouts load a plain causal LM) and from the reference model's refresh.

Not covered: GAE and the value loss (learner/algos/gae.py, value_loss.py), the step (engine.py).
"""

from __future__ import annotations

import torch

from rlvr.learner.engine_config import TrainEngineConfig

VALUE_HEAD = "rlvr_value_head"
_PREFIX = f"{VALUE_HEAD}."


class CriticUnsupportedError(ValueError):
    """A configuration the value-head critic cannot run with (yet)."""


def uses_critic(cfg: TrainEngineConfig) -> bool:
    """Whether this engine trains PPO with a critic (``advantage.name = "gae"``)."""
    return cfg.advantage.name == "gae"


def attach_value_head(model: torch.nn.Module, cfg: TrainEngineConfig) -> torch.nn.Linear:
    """Add the value head, a Linear(H, 1) initialised to 0 (every value starts at 0, so the first
    advantages are the returns), to ``model`` as ``rlvr_value_head``. Before DeepSpeed wraps it."""
    if cfg.lora.enabled:
        raise CriticUnsupportedError(
            'learn.engine.advantage.name = "gae" with learn.engine.lora.enabled = true is not supported yet '
            "(the value head would train outside the adapter and leave the exported adapter); "
            "turn LoRA off or use a group estimator (grpo, drgrpo, rloo)"
        )
    hidden = int(model.config.hidden_size)
    # Its default init draws from the global RNG: put the state back, so a PPO run samples what a
    # group estimator's run from the same seed samples (its first rollouts, its evaluations).
    with torch.random.fork_rng(devices=[]):
        head = torch.nn.Linear(hidden, 1, dtype=torch.float32)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    model.add_module(VALUE_HEAD, head)
    return head


def value_head(module: torch.nn.Module) -> torch.nn.Module:
    """The head of a model (or the DeepSpeed engine around it) that has one."""
    return getattr(module, VALUE_HEAD)


def param_groups(model: torch.nn.Module, cfg: TrainEngineConfig) -> list[dict]:
    """AdamW parameter groups: the policy's trainable parameters at ``optimizer.lr`` (group 0),
    the value head's at ``critic.lr`` (group 1, ``optimizer.lr`` when unset)."""
    head = [p for n, p in model.named_parameters() if n.startswith(_PREFIX)]
    policy = [p for n, p in model.named_parameters() if p.requires_grad and not n.startswith(_PREFIX)]
    lr = cfg.advantage.critic.lr or cfg.optimizer.lr
    return [{"params": policy, "lr": cfg.optimizer.lr}, {"params": head, "lr": lr}]


def without_critic(state: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor] | None:
    """A state dict without the value head's tensors (exports, the reference model)."""
    if state is None:
        return None
    return {k: v for k, v in state.items() if not k.startswith(_PREFIX)}


__all__ = ["CriticUnsupportedError", "VALUE_HEAD", "attach_value_head", "param_groups", "uses_critic",
           "value_head", "without_critic"]
