"""Peers' reward functions, unchanged, train a tiny model under `up`, from a module in the working
directory found through ``PYTHONPATH=.``.

The outsider's module worked in `audit` and failed in `up`: the roles dropped the working
directory from ``sys.path`` even when the user had put it there (``PYTHONPATH=.``), and the
verify role died with "No module named ...". Here ``my_rewards.py`` lies in the run's working
directory and re-exports open-r1's ``accuracy_reward`` and ``format_reward``, verl's GSM8K
``compute_score`` and TRL's ``reward_len`` (tests/data/peer_rewards/), combined by the
composite verifier; a chat dataset carries open-r1's ``solution`` column.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, write_config

pytestmark = pytest.mark.slow

MODULE = """
from tests.data.peer_rewards.open_r1_rewards import accuracy_reward, format_reward
from tests.data.peer_rewards.trl_doc_forms import reward_len
from tests.data.peer_rewards.verl_gsm8k import compute_score
"""


def test_peer_reward_functions_in_the_working_directory_train_under_up(tmp_path):
    from rlvr.learner.example.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny", hidden=64, layers=1, heads=2)
    work = tmp_path / "work"
    work.mkdir()
    (work / "my_rewards.py").write_text(MODULE)
    rows = [{"prompt": [{"role": "user", "content": f"What is {a} + {a}?"}], "solution": f"${2 * a}$"}
            for a in range(1, 13)]
    (work / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    parts = [{"name": "my_rewards:accuracy_reward"}, {"name": "my_rewards:format_reward", "weight": 0.2},
             {"name": "my_rewards:compute_score", "params": {"gold": "{gold}"}, "weight": 0.5},
             {"name": "my_rewards:reward_len", "weight": 0.01}]
    cfg = write_config(work / "run.json", {
        "run": "peers",
        "rollout": {"engine": {"kind": "hf", "model": str(model), "max_prompt_tokens": 64}, "max_inflight_tasks": 4},
        "verify": {"pool_size": 1, "warm_verifiers": [], "concurrency": 4,
                   "plugins": [p["name"] for p in parts]},
        "learn": {
            "group_size": 4, "groups_per_step": 2, "steps": 3, "checkpoint_every": 1, "dynamic_sampling": False,
            "sampling": {"max_tokens": 6, "temperature": 1.0},
            "dataset": {"kind": "jsonl", "path": "data.jsonl", "answer_field": "solution", "holdout": 2,
                        "verifier_spec": {"name": "composite", "params": {"parts": parts}}},
            "eval": {"prompts": 0},
            "engine": {"model_path": str(model), "zero_stage": 0, "bf16": False, "gradient_checkpointing": False,
                       "micro_batch_tokens": 4096, "pad_token_id": 0, "schedule": {"type": "constant"}},
        },
        "up": {"verify_replicas": 1, "rollout_replicas": 1, "display": "plain"},
    })
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([".", str(REPO)]))
    out = subprocess.run([sys.executable, "-m", "rlvr.cli", "up", "--config", str(cfg), "--run-dir", "run"],
                         capture_output=True, text=True, env=env, timeout=600, cwd=work)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((work / "run" / "summary.json").read_text())
    assert summary["steps"] == 3
    outcomes = summary["verifier_outcomes"]
    assert outcomes.get("error", 0) == 0 and sum(outcomes.values()) >= 24, outcomes
