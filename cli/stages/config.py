"""The ``[[stages]]`` of a run config: each a kind and its own overrides of ``[learn]``.

.. code-block:: toml

    [[stages]]
    kind = "sft"                      # cold start: SFT on prompt/completion pairs
    sft = { data = "@dataset", steps = 100, lr = 1e-3 }
    [[stages]]
    kind = "rl"
    learn = { steps = 200, engine = { loss = { kl_coef = 0.001 }, ref_update_every = 400 } }
    [[stages]]
    kind = "rejection_sft"            # n per prompt from the policy, keep what the verifier accepts, SFT on it
    n = 8
    prompts = 256
    filters = { max_per_prompt = 2, dedup = true }
    [[stages]]
    kind = "rl"

A stage's ``learn`` table is merged into ``[learn]``: tables merge key by key,
anything else replaces; a table whose tag (``kind`` of a dataset, ``name`` of a
verifier, ``type`` of a schedule) differs from the base's replaces it whole, so
a stage can switch ``dataset = { kind = "jsonl", path = "..." }``. The merged
section is validated like ``[learn]`` itself, and an error names the stage's
key (``$.stages[1].learn.engine.optimizer.lr``). ``prepare`` and ``out_dir``
belong to the run, not a stage.
"""

from __future__ import annotations

import copy
import re
from typing import Annotated, Any

import msgspec
from msgspec import Meta, Struct

from rlvr.learner.config import LearnConfig
from rlvr.learner.data.rejection import RejectionFilters

PositiveInt = Annotated[int, Meta(ge=1)]
_TAGS = ("kind", "name", "type")
_RUN_ONLY = ("prepare", "out_dir")


class SFTOptions(Struct, frozen=True, forbid_unknown_fields=True):
    # The pairs: a JSON-lines file of {"prompt", "completion"} (learner/data/sft_pairs.py), or
    # "@dataset": the stage's learn.dataset train split with its reference answers.
    # rejection_sft ignores it: it trains on the set it kept.
    data: str = "@dataset"
    # Pairs taken from "@dataset" at most (0 = the whole train split).
    limit: Annotated[int, Meta(ge=0)] = 0
    # Optimizer steps of SFT.
    steps: PositiveInt = 100
    # Pairs per step (drawn from a seeded shuffle, a new one every epoch).
    batch: PositiveInt = 64
    # AdamW learning rate (betas, weight decay and gradient clip from learn.engine).
    lr: Annotated[float, Meta(gt=0)] = 1e-4
    # Steps of linear learning-rate warm-up from 0.
    warmup_steps: Annotated[int, Meta(ge=0)] = 0


class SFTStage(Struct, frozen=True, forbid_unknown_fields=True, tag="sft", tag_field="kind"):
    # Shown in the summary and names the stage's folder (default: the kind).
    name: str = ""
    # The SFT itself: its data, steps, batch and learning rate.
    sft: SFTOptions = SFTOptions()
    # Overrides of [learn] for this stage: its dataset ("@dataset") and the held-out check.
    learn: dict[str, Any] = {}


class RLStage(Struct, frozen=True, forbid_unknown_fields=True, tag="rl", tag_field="kind"):
    # Shown in the summary and names the stage's folder (default: the kind).
    name: str = ""
    # Overrides of [learn] for this stage: steps, dataset, train_verifier, reward weights (the
    # verifier's params), algorithm (engine.advantage, engine.loss), reference refresh
    # (engine.ref_update_every), curriculum... The reference model is the policy at the stage's start.
    learn: dict[str, Any] = {}


class RejectionSFTStage(Struct, frozen=True, forbid_unknown_fields=True, tag="rejection_sft", tag_field="kind"):
    # Shown in the summary and names the stage's folder (default: the kind).
    name: str = ""
    # Completions sampled per prompt from the current policy (through rollout and verify).
    n: Annotated[int, Meta(ge=2)] = 8
    # Training prompts sampled (drawn as the feeder draws them: a seeded shuffle).
    prompts: PositiveInt = 256
    # Prompts per sampling batch (a dry learner's step; 0 = learn.groups_per_step).
    prompts_per_batch: Annotated[int, Meta(ge=0)] = 0
    # Which accepted completions are kept (length, truncation, language mixing, per prompt, duplicates).
    filters: RejectionFilters = RejectionFilters()
    # The SFT on the kept set (its `data` is the kept set).
    sft: SFTOptions = SFTOptions()
    # Overrides of [learn] for the sampling: its dataset, verifier (train_verifier), sampling.
    learn: dict[str, Any] = {}


Stage = SFTStage | RLStage | RejectionSFTStage


def stage_name(stage: Stage, index: int) -> str:
    """``<index>-<name or kind>``: the stage's folder and its line in the summary."""
    label = re.sub(r"[^A-Za-z0-9_-]", "-", stage.name or stage.__struct_config__.tag)[:40]
    return f"{index}-{label}"


def merge(base: Any, override: Any) -> Any:
    """``override`` merged into ``base`` (plain data): tables key by key, a table with another tag whole."""
    if not isinstance(base, dict) or not isinstance(override, dict):
        return copy.deepcopy(override)
    if any(t in override and t in base and override[t] != base[t] for t in _TAGS):
        return copy.deepcopy(override)
    out = dict(base)
    for k, v in override.items():
        out[k] = merge(base[k], v) if k in base else copy.deepcopy(v)
    return out


def stage_learn(learn: LearnConfig, stage: Stage, index: int) -> LearnConfig:
    """``[learn]`` with the stage's overrides, validated; an error names ``$.stages[<index>].learn...``."""
    where = f"$.stages[{index}].learn"
    for key in _RUN_ONLY:
        if key in stage.learn:
            raise msgspec.ValidationError(f"`{key}` belongs to the whole run, not a stage - at `{where}.{key}`")
    raw = merge(msgspec.to_builtins(learn), stage.learn)
    try:
        merged = msgspec.convert(raw, LearnConfig)
    except (msgspec.ValidationError, ValueError) as e:
        text = str(e)
        text = re.sub(r"at `\$", f"at `{where}", text) if "at `$" in text else f"{text} - at `{where}`"
        raise msgspec.ValidationError(text) from None
    if merged.engine is None and not isinstance(stage, RejectionSFTStage):
        raise msgspec.ValidationError(f"a {stage.__struct_config__.tag} stage trains: it needs "
                                      f"[learn.engine] - at `$.stages[{index}]`")
    if merged.engine is not None and merged.engine.lora.enabled:
        raise msgspec.ValidationError(f"stages train and hand on full weights: learn.engine.lora is not "
                                      f"supported with stages - at `{where}.engine.lora`")
    return merged


def bus_runs(learn: LearnConfig, stages: tuple[Stage, ...]) -> int:
    """The runs with streams of their own that ``up`` makes for these stages, at most (cli/stages/runner.py):
    an RL stage one; a measurement one, before and after an SFT or a rejection_sft stage where the stage
    has eval prompts (a model measured already is not measured again, so this may count too many);
    rejection sampling one. Every run's streams stay on the run's one nats-server to its end."""
    runs = 0
    for i, stage in enumerate(stages):
        if isinstance(stage, RLStage):
            runs += 1
            continue
        runs += 2 if stage_learn(learn, stage, i).eval.prompts else 0
        runs += 1 if isinstance(stage, RejectionSFTStage) else 0
    return runs


def check_stages(learn: LearnConfig, stages: tuple[Stage, ...]) -> None:
    """Every stage's merged ``[learn]`` is valid (``stage_learn``)."""
    for i, s in enumerate(stages):
        merged = stage_learn(learn, s, i)
        if isinstance(s, RejectionSFTStage) and not merged.samples.dump:
            raise msgspec.ValidationError("rejection sampling reads the sample records: learn.samples.dump "
                                          f"must stay true - at `$.stages[{i}].learn.samples.dump`")
