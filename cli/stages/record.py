"""The stage record, ``<run_dir>/stages.json``: what each stage has done, so a stopped run
resumes at the stage (and, through that stage's own checkpoint, the step) where it stopped.

Written whole after every change (a temporary file, fsync, rename): a kill leaves the
previous record or the new one, never half. A stage is ``pending``, ``running`` (its
``phase`` says which part: ``sample``, ``filter``, ``sft``, ``rl``, ``measure``) or
``done``; a done stage is never run again, a running one restarts its phase: the RL
learner and the rejection sampler resume from their checkpoints in the stage's folder,
an SFT phase (no bus, no samples to lose) runs again from the stage's start model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import msgspec

RECORD_FILE = "stages.json"


class StageResult(msgspec.Struct, kw_only=True):
    index: int
    name: str
    kind: str
    status: Literal["pending", "running", "done"] = "pending"
    phase: str = ""
    # Tries of this stage (1 + the resumes).
    attempts: int = 0
    # The model the stage started from and the one it handed on.
    model_start: str = ""
    model_end: str = ""
    # Optimizer steps the stage took (RL, or its SFT).
    steps: int = 0
    # Held-out pass@1 of model_start and model_end (None without [learn.eval] prompts).
    pass_at_1_before: float | None = None
    pass_at_1_after: float | None = None
    # Wall seconds over every attempt.
    seconds: float = 0.0
    # What the stage's parts reported: the kept set's counts, the SFT losses, samples trained...
    detail: dict[str, Any] = {}


class StageRecord(msgspec.Struct, kw_only=True):
    # The stage kinds and names in order: a resumed run must have the same stages.
    plan: list[str]
    stages: list[StageResult]
    # The model the next stage starts from ("" before the preparation step).
    model: str = ""
    # Held-out pass@1 measured per model folder, so a model is never measured twice.
    pass_at_1: dict[str, float] = {}


class StagePlanChangedError(ValueError):
    """The run dir's stage record lists other stages than the config."""


def load_record(run_dir: Path, plan: list[str]) -> StageRecord:
    """The record in ``run_dir``, or a new one for ``plan``; a record of another plan is an error."""
    path = Path(run_dir) / RECORD_FILE
    if not path.exists():
        return StageRecord(plan=plan, stages=[StageResult(index=i, name=p.split(":", 1)[1], kind=p.split(":", 1)[0])
                                               for i, p in enumerate(plan)])
    record = msgspec.json.decode(path.read_bytes(), type=StageRecord)
    if record.plan != plan:
        raise StagePlanChangedError(f"{path} records the stages {record.plan}, the config lists {plan}: "
                                    "resume with the config the run started with, or use a new --run-dir")
    return record


def save_record(run_dir: Path, record: StageRecord) -> None:
    path = Path(run_dir) / RECORD_FILE
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(msgspec.json.format(msgspec.json.encode(record), indent=2))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
