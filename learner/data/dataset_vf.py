"""The ``verifiers`` dataset kind: the tasks of a ``verifiers`` environment, as episodes of it.

``verifiers.load_environment(env_id, **env_args)`` gives the environment and
its dataset (``get_dataset()``, or ``get_eval_dataset()`` for the held-out
split when it has one). Each row becomes a task: its prompt (the rows carry
the environment's system prompt already), the environment as the task's
``env`` (``name = "verifiers"``: the rollout drives the environment's own
loop, ``rlvr.rollout.envs.verifiers_env``), the row's answer, info and
example id in the record, and the ``env`` verifier: the reward is what the
environment's rubric scores. Tested against ``verifiers==0.1.14``.
"""

from __future__ import annotations

from typing import Any

from rlvr.actors.plugins import keep_signal_handlers
from rlvr.learner.data.dataset_config import VerifiersDataset
from rlvr.learner.data.dataset_records import DatasetError, render_prompt
from rlvr.protocol import VerifierSpec
from rlvr.protocol.tasks import EnvSpec


def verifiers_specs(cfg: VerifiersDataset) -> tuple[list, list | None]:
    """(the training specs, the held-out specs when the environment has an eval dataset)."""
    try:
        import verifiers as vf
    except ImportError as e:
        raise DatasetError(f"kind = \"verifiers\" needs the verifiers package (pip install 'rlvr-actor[env]'): {e}") from None
    try:
        with keep_signal_handlers():  # verifiers installs its own SIGTERM (exit 143) and SIGINT handlers
            env = vf.load_environment(cfg.env_id, **cfg.env_args)
    except Exception as e:  # its own code: say which environment and what it raised
        raise DatasetError(f"verifiers environment {cfg.env_id!r} did not load: {type(e).__name__}: {e}") from None
    spec = EnvSpec("verifiers", {"env_id": cfg.env_id, "env_args": cfg.env_args, "tools": list(cfg.tools)},
                   max_turns=cfg.max_turns, max_tokens=cfg.max_tokens)
    train = _specs(cfg, env.get_dataset(), spec)
    held = None
    if cfg.heldout == "eval_dataset":
        try:
            held = _specs(cfg, env.get_eval_dataset(), spec)
        except Exception as e:  # noqa: BLE001 - verifiers raises for an environment without one
            raise DatasetError(f"verifiers environment {cfg.env_id!r} has no eval dataset: {e}") from None
    return train, held


def _specs(cfg: VerifiersDataset, dataset: Any, env: EnvSpec) -> list:
    from rlvr.learner.data.datasets import TaskSpec

    out = []
    for i, row in enumerate(dataset):
        prompt = [{"role": m["role"], "content": m.get("content") or ""} for m in row["prompt"]]
        record = {"answer": row.get("answer", ""), "info": row.get("info") or {}, "example_id": row.get("example_id", i)}
        if isinstance(row.get("task"), dict):
            record["task"] = row["task"]
        out.append(TaskSpec(f"verifiers/{cfg.env_id}", i, render_prompt(prompt, cfg), VerifierSpec("env"),
                            record=record, env=env))
    return out


__all__ = ["verifiers_specs"]
