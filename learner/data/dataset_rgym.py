"""The ``reasoning_gym`` dataset kind: a weighted mix of reasoning-gym's procedural tasks.

Each task of the mix is one or more reasoning-gym datasets: its ``config``
alone, or, for each of its curriculum ``levels``, the config its curriculum
generates at that global level (``config`` then overrides single fields).
Training problems are drawn with a seeded generator: a task by weight, then
one of its levels; the k-th draw from a (task, level) is that dataset's k-th
entry, so the mix is a pure function of (config, seed). Held-out problems
come from datasets with other seeds, and every training problem whose
question is also held out is removed (exact match).

A problem's verifier is ``reasoning_gym`` (``rlvr.verify.rgym``): the
verify role rebuilds the task's dataset from the same config and calls its
own ``score_answer`` on the answer found in the completion. The entry travels
in the verifier's params; a level becomes ``Task.level`` (``curriculum = "by_level"``).

reasoning-gym is imported here, lazily: it is an optional extra (``pip
install 'rlvr-actor[gym]'``), and its import takes about a second.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from rlvr.learner.data.dataset_config import ReasoningGymDataset, ReasoningGymTask
from rlvr.learner.data.dataset_records import DatasetError, render_prompt
from rlvr.protocol import VerifierSpec

# The system prompt for each answer format when the config gives none.
INSTRUCTIONS = {
    "answer_tag": "Answer the question. Think step by step if you need to, then give only the final answer "
                  "inside <answer></answer> tags, for example <answer>42</answer>.",
    "boxed": "Answer the question. Think step by step if you need to, then put only the final answer "
             "inside \\boxed{}, for example \\boxed{42}.",
    "whole": "Answer the question with the final answer only.",
}
_HELDOUT_SEED = 7919  # held-out datasets use other seeds than the training ones


def reasoning_gym_splits(cfg: ReasoningGymDataset, seed: int):
    from rlvr.learner.data.datasets import Splits

    try:
        import reasoning_gym  # noqa: F401
    except ImportError as e:
        raise DatasetError(
            f"kind = \"reasoning_gym\" needs the reasoning-gym package (pip install 'rlvr-actor[gym]'): {e}"
        ) from None
    slots = [(t, level) for t in cfg.tasks for level in (t.levels or [None])]
    weights = [t.weight / len(t.levels or [None]) for t, _ in slots]
    held = _draw(cfg, slots, weights, cfg.holdout, seed + _HELDOUT_SEED, purpose="heldout")
    seen = {_question(s) for s in held}
    train = [s for s in _draw(cfg, slots, weights, cfg.size, seed, purpose="train") if _question(s) not in seen]
    if not train:
        raise DatasetError("reasoning_gym: every training problem is also held out; raise size or vary the tasks")
    return Splits(train=train, heldout=held)


def task_config(task: ReasoningGymTask, level: int | None, *, seed: int, size: int) -> dict[str, Any]:
    """The config of one (task, level) dataset, as ``create_dataset`` takes it."""
    from reasoning_gym.factory import create_curriculum, has_curriculum

    base: dict[str, Any] = {}
    if level is not None:
        if not has_curriculum(task.name):
            raise DatasetError(f"reasoning_gym task {task.name!r} has no curriculum; drop its `levels`")
        curriculum = create_curriculum(task.name)
        curriculum.set_global_level(level)
        base = dataclasses.asdict(curriculum.generate_configuration({"seed": seed, "size": size}))
    return {**base, **task.config, "seed": seed, "size": size}


def _draw(cfg: ReasoningGymDataset, slots: list, weights: list[float], count: int, seed: int, *, purpose: str) -> list:
    import reasoning_gym

    from rlvr.learner.data.datasets import TaskSpec

    if count == 0:
        return []
    rng = random.Random(seed)
    style = cfg if cfg.system_prompt else _with_instruction(cfg)
    datasets: dict[int, tuple[Any, dict[str, Any]]] = {}
    taken = [0] * len(slots)
    out = []
    for i in range(count):
        j = rng.choices(range(len(slots)), weights)[0]
        task, level = slots[j]
        if j not in datasets:
            config = task_config(task, level, seed=seed * 1000 + j, size=count)
            try:
                datasets[j] = (reasoning_gym.create_dataset(task.name, **config), config)
            except (TypeError, ValueError, AssertionError, KeyError) as e:  # reasoning-gym validates with asserts
                raise DatasetError(f"reasoning_gym task {task.name!r} ({purpose}): {type(e).__name__}: {e}") from None
        ds, config = datasets[j]
        entry = ds[taken[j]]
        taken[j] += 1
        params = {"task": task.name, "config": config, "entry": entry, "answer_format": cfg.answer_format,
                  "binary": cfg.binary}
        out.append(TaskSpec(f"reasoning_gym/{task.name}", i, render_prompt(entry["question"], style),
                            VerifierSpec("reasoning_gym", params), level=level,
                            reference=str(entry.get("answer") or "")))
    return out


def _with_instruction(cfg: ReasoningGymDataset):
    import msgspec

    return msgspec.structs.replace(cfg, system_prompt=INSTRUCTIONS[cfg.answer_format])


def _question(spec) -> str:
    return spec.verifier.params["entry"]["question"]


__all__ = ["INSTRUCTIONS", "reasoning_gym_splits", "task_config"]
