"""The tiny four-stage run the stage tests start: the built-in example's model, small and quick."""

from __future__ import annotations

from pathlib import Path

import msgspec

from rlvr.cli.commands.up import builtin_config_path
from tests.conftest import write_config

# The sampling stage is judged on format alone, so a barely warmed-up model keeps samples for its SFT.
FORMAT_ONLY = {"name": "regex", "params": {"pattern": "^-?[0-9]+$", "mode": "full"}}


def tiny_stages(run: str) -> dict:
    raw = msgspec.toml.decode(builtin_config_path().read_bytes())
    raw["run"] = run
    raw["observability"] = {}
    raw["rollout"]["max_inflight_tasks"] = 16
    learn = raw["learn"]
    learn.update(group_size=4, groups_per_step=4, steps=3, checkpoint_every=1, dynamic_sampling=False,
                 group_timeout_s=120.0, progress_every_s=5.0)
    learn["dataset"].update(max_operand=20, holdout=40)
    learn["eval"] = {"prompts": 16, "n": 2, "ks": [1], "every_steps": 0, "keep_completions": 0}
    learn["prepare"].update(hidden=32, layers=1, heads=1, sft_target_pass_at_1=0.0, sft_check_every=60,
                            sft_max_steps=60, sft_check_prompts=8, sft_batch=64)
    # Every part is a run of its own on the one server, each reserving SCORED and DEAD (cli/bus_disk.py):
    # the defaults' 2.25 GiB a run would ask 13.5 GiB of a CI machine's disk for a few MB of samples.
    raw.setdefault("bus", {}).update(scored_max_bytes=64 << 20, dead_max_bytes=16 << 20)
    raw["up"] = {"rollout_replicas": 1, "verify_replicas": 1, "learner_threads": 1, "threads_per_process": 1,
                 "display": "plain", "stop_timeout_s": 20.0}
    raw["stages"] = [
        {"kind": "sft", "name": "cold-start", "sft": {"steps": 30, "batch": 64, "lr": 1e-3}},
        {"kind": "rl", "name": "reasoning-rl", "learn": {"steps": 3}},
        {"kind": "rejection_sft", "name": "rejection", "n": 4, "prompts": 8, "prompts_per_batch": 2,
         "filters": {"max_per_prompt": 2, "dedup": True, "max_tokens": 7},
         "sft": {"steps": 4, "batch": 8, "lr": 1e-4}, "learn": {"train_verifier": FORMAT_ONLY}},
        {"kind": "rl", "name": "final-rl",
         "learn": {"steps": 3, "engine": {"loss": {"kl_coef": 0.001}, "ref_update_every": 2}}},
    ]
    return raw


def write_tiny_stages(path: Path, run: str) -> Path:
    return write_config(path, tiny_stages(run))
