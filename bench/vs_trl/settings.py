"""The algorithmic settings, set alike wherever both frameworks have them, and the ones that differ.

``trl_args(cfg)`` derives TRL's ``GRPOConfig`` arguments from the rlvr-actor config the run uses, so
there is one source for each number; ``table(cfg)`` lists each setting for both, and ``DIFFERENCES``
says what cannot be made equal and why.
"""

from __future__ import annotations


def trl_args(cfg) -> dict:
    learn, engine = cfg.learn, cfg.learn.engine
    loss, opt = engine.loss, engine.optimizer
    rows = learn.groups_per_step * learn.group_size
    return {
        "num_generations": learn.group_size,
        "per_device_train_batch_size": rows,  # one optimizer step = B prompts x G completions
        "gradient_accumulation_steps": 1,
        "steps_per_generation": 1,
        "num_iterations": engine.ppo_epochs,
        "learning_rate": opt.lr,
        "adam_beta1": opt.betas[0],
        "adam_beta2": opt.betas[1],
        "adam_epsilon": opt.eps,
        "weight_decay": opt.weight_decay,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "max_grad_norm": engine.grad_clip,
        "epsilon": loss.eps_low,
        "epsilon_high": loss.eps_high,
        "beta": loss.kl_coef,
        "loss_type": "dapo",  # token-mean over the whole batch: rlvr-actor's aggregation = "token-mean"
        "scale_rewards": "group",  # (r - mean) / std within the group: rlvr-actor's advantage "grpo"
        "temperature": learn.sampling.temperature,
        "top_p": 1.0,
        "top_k": 0,
        "max_completion_length": learn.sampling.max_tokens,
        "mask_truncated_completions": False,
    }


def table(cfg) -> list[tuple[str, str, str]]:
    """(setting, rlvr-actor, TRL) for each setting both have."""
    learn, engine = cfg.learn, cfg.learn.engine
    t = trl_args(cfg)
    return [
        ("group size G", str(learn.group_size), str(t["num_generations"])),
        ("prompts per optimizer step B", str(learn.groups_per_step),
         f"{t['per_device_train_batch_size'] // t['num_generations']} (batch {t['per_device_train_batch_size']})"),
        ("optimizer", f"AdamW lr {engine.optimizer.lr:g} betas {tuple(engine.optimizer.betas)} wd "
                      f"{engine.optimizer.weight_decay:g}",
         f"AdamW lr {t['learning_rate']:g} betas ({t['adam_beta1']}, {t['adam_beta2']}) wd {t['weight_decay']:g}"),
        ("lr schedule", f"{engine.schedule.__struct_config__.tag}, warm-up {engine.schedule.warmup_steps}",
         f"{t['lr_scheduler_type']}, warm-up {t['warmup_steps']}"),
        ("grad clip", f"{engine.grad_clip:g}", f"{t['max_grad_norm']:g}"),
        ("clip range (low, high)", f"({engine.loss.eps_low}, {engine.loss.eps_high})",
         f"({t['epsilon']}, {t['epsilon_high']})"),
        ("KL coefficient", f"{engine.loss.kl_coef:g}", f"{t['beta']:g}"),
        ("advantage", f"{engine.advantage.name} (group std)", f"scale_rewards={t['scale_rewards']}"),
        ("loss aggregation", engine.loss.aggregation, f"loss_type={t['loss_type']} (token mean)"),
        ("epochs per batch", str(engine.ppo_epochs), str(t["num_iterations"])),
        ("temperature, top-p, top-k", f"{learn.sampling.temperature:g}, 1, 0 (off)",
         f"{t['temperature']:g}, {t['top_p']:g}, {t['top_k']} (off)"),
        ("max completion tokens", str(learn.sampling.max_tokens), str(t["max_completion_length"])),
    ]


DIFFERENCES = [
    ("dynamic sampling (drop zero-variance groups)", "on: a step waits for B groups with signal",
     "not offered: such groups get advantage 0 and still cost generation and a forward+backward, and "
     "their tokens count in the token-mean's denominator"),
    ("staleness", "max_staleness 1: the rollout generates the next batch while the learner trains "
     "(importance-corrected)", "strictly on-policy: generation and training take turns in one process"),
    ("generation", "the task's engine in a rollout process of its own (hf for the built-in example, vLLM "
     "for SmolLM2), weights synced each step", "HF generate inside the trainer (TRL's CPU path; no vLLM)"),
    ("reward", "the verifier actors (exact + 0.2 format; math + 0.2 format for SmolLM2)",
     "the same verifier called in process as a TRL reward function"),
]


def differences(cfg) -> list[tuple[str, str, str]]:
    """``DIFFERENCES`` with the dynamic-sampling row as ``cfg`` sets it (``--set learn.dynamic_sampling=false``
    makes rlvr-actor train zero-variance groups at advantage 0, as TRL does)."""
    if cfg.learn.dynamic_sampling and cfg.learn.dynamic_sampling_refill:
        return DIFFERENCES
    if cfg.learn.dynamic_sampling:
        return [("dynamic sampling (drop zero-variance groups)", "on, not refilled (`learn.dynamic_sampling_refill = "
                 "false`): a step takes the next B groups and trains the ones with signal, without waiting",
                 DIFFERENCES[0][2]), *DIFFERENCES[1:]]
    return [("dynamic sampling (drop zero-variance groups)", "off (`learn.dynamic_sampling = false`): such groups "
             "are trained at advantage 0, as in TRL", "not offered (the same)"), *DIFFERENCES[1:]]
