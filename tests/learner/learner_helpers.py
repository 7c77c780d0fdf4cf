"""Shared pieces of the learner's bus tests: configs, scored streams, weights."""

from __future__ import annotations

import random
from pathlib import Path

from rlvr.protocol import Completion, Sample, SamplingParams, Scored, Verdict, VerifierSpec
from tests.conftest import write_config


def learner_config(tmp_path: Path, run: str, model: Path, *, zero_stage: int, steps: int, groups_per_step: int,
                   checkpoint_every: int = 1, out_dir: Path | None = None) -> Path:
    return write_config(
        tmp_path / f"{run}.json",
        {
            "run": run,
            "bus": {"heartbeat_every_s": 0.5, "ack_wait_s": 30.0},
            "learn": {
                "group_size": 4, "groups_per_step": groups_per_step, "steps": steps, "max_staleness": 1000,
                "checkpoint_every": checkpoint_every, "sync_every": 1, "max_inflight_tasks": 1,
                "out_dir": str(out_dir or tmp_path / f"out-{run}"),
                "engine": {"model_path": str(model), "zero_stage": zero_stage, "micro_batch_tokens": 256,
                           "optimizer": {"lr": 1e-3}, "export_dtype": "fp32"},
            },
        },
    )


def scored_groups(run: str, groups: int, *, vocab: int, seed: int = 0, zero_variance: tuple[int, ...] = (),
                  failed_sample_in: tuple[int, ...] = ()) -> list[Scored]:
    """``groups`` groups of 4 scored samples with random tokens and rewards."""
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        zero_var = g in zero_variance
        rewards = [1.0] * 4 if zero_var else [1.0, 0.0, float(rng.random() < 0.5), 0.0]
        prompt = [rng.randrange(3, vocab) for _ in range(5)]
        for i in range(4):
            length = rng.randint(2, 6)
            sample = Sample(
                run=run, task_id=f"{run}-g{g}", sample_index=i, group_id=f"{run}-g{g}", group_size=4,
                prompt_ids=prompt,
                completion=Completion([rng.randrange(3, vocab) for _ in range(length)], [-1.0] * length),
                text="x", finish_reason="stop", policy_version=0, policy_version_max=0,
                verifier=VerifierSpec("exact", {"gold": "1"}), sampling=SamplingParams(max_tokens=8), replica="t",
            )
            outcome = "timeout" if (g in failed_sample_in and i == 3) else ("ok" if rewards[i] else "wrong")
            out.append(Scored(sample=sample, verdict=Verdict(rewards[i], outcome, "exact")))  # type: ignore[arg-type]
    return out


def final_weights(out_dir: Path) -> Path:
    versions = sorted((out_dir / "weights").glob("v*"), key=lambda p: int(p.name[1:]))
    return versions[-1]
