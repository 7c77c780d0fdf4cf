"""The judge, the hybrid and RLPR each train a tiny model under `up`, and their outcomes are counted.

One short run per verifier, with a randomly initialised tiny model served by
the hf engine: its answers are noise, which is the point for the judge
(``parse_error`` from the rules, then the judge) and for RLPR (a fraction
from the rollout's own measure). The judge is the local endpoint of
tests/judge_server.py (the model behind it is not what these runs test;
tests/verify/test_judge_vllm.py runs a real one). The summary must count
each outcome, the step records must carry the verifier's pass rate, and the
rewards of a run must be fractions where the verifier gives partial credit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, write_config
from tests.judge_server import JudgeServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from rlvr.learner.example.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("m") / "tiny", hidden=64, layers=1, heads=2)


def _config(model, verifier: dict) -> dict:
    return {
        "run": "rewards",
        "rollout": {"engine": {"kind": "hf", "model": str(model), "max_prompt_tokens": 64}, "max_inflight_tasks": 8},
        "verify": {"pool_size": 1, "warm_verifiers": [], "concurrency": 8},
        "learn": {
            "group_size": 4, "groups_per_step": 2, "steps": 3, "checkpoint_every": 1, "dynamic_sampling": False,
            "sampling": {"max_tokens": 6, "temperature": 1.0},
            "dataset": {"kind": "arithmetic", "holdout": 4, "verifier": verifier},
            "eval": {"prompts": 0},
            "engine": {"model_path": str(model), "zero_stage": 0, "bf16": False, "gradient_checkpointing": False,
                       "micro_batch_tokens": 4096, "pad_token_id": 0, "schedule": {"type": "constant"}},
        },
        "up": {"verify_replicas": 1, "rollout_replicas": 1, "display": "plain"},
    }


def _run(tmp_path, cfg: dict) -> tuple[dict, list[dict]]:
    path = write_config(tmp_path / "cfg.json", cfg)
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "rlvr.cli", "up", "--config", str(path), "--run-dir", str(run_dir)],
                         capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=600,
                         cwd=REPO)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return json.loads((run_dir / "summary.json").read_text()), [s for s in steps if "step" in s and "loss" in s]


@pytest.mark.parametrize("kind", ["llm_judge", "hybrid"])
def test_a_judged_run_trains_and_counts_the_judges_outcomes(tiny, tmp_path, kind):
    with JudgeServer() as judge:
        judge.answer = "6"  # 0.6: partial credit, every time
        params = {"url": judge.url, "model": "judge", "gold": "{gold}", "timeout_s": 10.0}
        verifier = {"name": "llm_judge", "params": params} if kind == "llm_judge" else {
            "name": "hybrid", "params": {"rules": {"name": "exact", "params": {"gold": "{gold}", "after": "ANSWER:"}},
                                         "judge": params}}
        summary, steps = _run(tmp_path, _config(tiny, verifier))
    assert summary["steps"] == 3 and judge.requests  # the judge was asked, by the verifier role
    outcomes = summary["verifier_outcomes"]
    assert outcomes["ok"] >= 24 and sum(outcomes.values()) == outcomes["ok"]  # every verdict an ok, judged 0.6
    assert all(s["reward_mean"] == pytest.approx(0.6) for s in steps)  # the fraction, unrounded, in training
    assert f"pass_rate_{kind}" in steps[-1]


def test_an_rlpr_run_trains_on_the_rollouts_own_measure(tiny, tmp_path):
    verifier = {"name": "rlpr", "params": {"reference": "{gold}", "answer": "whole", "debias": False}}
    summary, steps = _run(tmp_path, _config(tiny, verifier))
    outcomes = summary["verifier_outcomes"]
    assert summary["steps"] == 3 and outcomes["ok"] >= 24 and sum(outcomes.values()) == outcomes["ok"]
    rewards = [s["reward_mean"] for s in steps]
    assert all(0.0 < r < 1.0 for r in rewards), rewards  # probabilities, not 0/1
    assert "pass_rate_rlpr" in steps[-1]


def test_an_rlpr_run_whose_completions_have_no_answer_counts_parse_errors_and_says_so(tiny, tmp_path):
    verifier = {"name": "rlpr", "params": {"reference": "{gold}", "answer": "answer_tag"}}
    cfg = _config(tiny, verifier)
    cfg["learn"]["steps"] = 6  # 48 verdicts: past the alarm's min_samples (32)
    summary, _ = _run(tmp_path, cfg)
    outcomes = summary["verifier_outcomes"]
    assert outcomes["parse_error"] >= 48 and sum(outcomes.values()) == outcomes["parse_error"]
    assert any("rlpr" in a and "parse_error" in a for a in summary["alarms"]), summary["alarms"]
