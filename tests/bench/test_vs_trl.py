"""bench/vs_trl.py's pieces on a tiny budget: the settings both get, the one evaluation, the reward as
TRL calls it, the rlvr-actor config, a TRL run of one step, the limit loop, the figures; and that
nothing in the project's runtime imports TRL (it is a `bench` extra only).

Not a timed test: speeds are what bench/vs_trl.py measures, by hand.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

RUNTIME = ("protocol", "actors", "sandbox", "rollout", "verify", "learner", "cli")


def test_no_runtime_module_imports_trl():
    pattern = re.compile(r"^\s*(import\s+trl\b|from\s+trl\b)", re.M)
    offenders = [str(p.relative_to(REPO)) for folder in RUNTIME for p in (REPO / folder).rglob("*.py")
                 if pattern.search(p.read_text(errors="replace"))]
    assert offenders == []
    roles = ["rlvr.cli.main", "rlvr.learner.actor", "rlvr.rollout.actor", "rlvr.verify.actor",
             "rlvr.verify.reward_fns", "rlvr.learner.example.prepare"]
    code = f"import sys; [__import__(m) for m in {roles!r}]; print('trl' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_trl_is_only_a_bench_extra():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("trl") for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert [d for d in extras["bench"] if d.startswith("trl")] == [d for d in extras["bench"] if d.startswith("trl==")]
    assert all(not d.startswith("trl") for name, deps in extras.items() if name != "bench" for d in deps)


@pytest.fixture(scope="module")
def task():
    from vs_trl.task import Task

    return Task.load("builtin")


def test_trl_gets_the_same_settings(task):
    from vs_trl import settings

    cfg = task.cfg
    args = settings.trl_args(cfg)
    assert args["num_generations"] == cfg.learn.group_size
    assert args["per_device_train_batch_size"] == cfg.learn.groups_per_step * cfg.learn.group_size
    assert (args["learning_rate"], args["adam_beta1"], args["adam_beta2"]) == (
        cfg.learn.engine.optimizer.lr, *cfg.learn.engine.optimizer.betas)
    assert (args["epsilon"], args["epsilon_high"], args["beta"]) == (
        cfg.learn.engine.loss.eps_low, cfg.learn.engine.loss.eps_high, 0.0)
    assert (args["temperature"], args["max_completion_length"]) == (
        cfg.learn.sampling.temperature, cfg.learn.sampling.max_tokens)
    trl = pytest.importorskip("trl")
    trl.GRPOConfig(output_dir="/nonexistent-unused", use_cpu=True, report_to="none", **args)  # TRL accepts each
    rows = settings.table(cfg)
    assert {r[0] for r in rows} >= {"group size G", "KL coefficient", "max completion tokens"}


def test_reward_fn_is_the_verifier(task):
    from vs_trl.task import RewardFn

    fn = RewardFn(task.train[:2], task.max_tokens)
    gold = task.train[0].reference
    rewards = fn(prompts=["", ""], completions=[gold, "x"], completion_ids=[[1, 2], [3]], index=[0, 1])
    assert rewards[0] == pytest.approx(1.2)  # exact (1.0) + format (0.2)
    assert rewards[1] == 0.0
    assert (fn.completions, fn.completion_tokens) == (2, 3)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from rlvr.learner.example.arith_model import build_arith_model

    return build_arith_model(tmp_path_factory.mktemp("arith") / "model", hidden=64, layers=1, heads=2)


def test_one_evaluation_for_saved_weights(task, tiny_model, tmp_path):
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    from vs_trl.evaluate import pass_at_1

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    same = tmp_path / "same"
    same.mkdir()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, same / "model.safetensors")
    kw = {"prompts": 6, "n": 3}
    assert pass_at_1(tiny_model, same, task, **kw) == pass_at_1(tiny_model, None, task, **kw)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="safetensors"):
        pass_at_1(tiny_model, empty, task, **kw)


def test_rlvr_config_starts_from_the_checkpoint(tiny_model, tmp_path):
    from rlvr.cli.run_config import load_config
    from vs_trl import run_rlvr
    from vs_trl.task import config_path

    path = run_rlvr.write_config(config_path("builtin"), tiny_model, tmp_path, keep_every=5)
    cfg = load_config(path)
    assert cfg.learn.prepare is None
    assert cfg.rollout.engine.model == cfg.learn.engine.model_path == str(tiny_model)
    assert (cfg.learn.eval.prompts, cfg.learn.keep_weights_every) == (0, 5)


def test_rlvr_collect_reads_snapshots_and_steps(tmp_path):
    from vs_trl import run_rlvr

    launched = time.time()
    for v in (5, 10):
        d = tmp_path / "learn" / "weights" / f"v{v}"
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"")
    stale = tmp_path / "learn" / "weights" / "v1"  # an earlier run's export: not this run's
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"")
    os.utime(stale / "model.safetensors", (launched - 3600, launched - 3600))
    steps = [{"step": i, "train_s": 0.5, "wait_s": 0.1, "publish_s": 0.0, "samples": 16, "response_len_mean": 3.0,
              "drop_zero_variance": 8 * i} for i in (1, 2)]
    (tmp_path / "learn" / "metrics.jsonl").write_text("\n".join(map(json.dumps, steps)) + "\n")
    got = run_rlvr.collect(tmp_path, launched - 1, wall_s=60)
    assert [s["step"] for s in got["snapshots"]] == [5, 10]
    assert (got["steps"], got["samples_trained"], got["samples_generated"], got["tokens_trained"]) == (2, 32, 48, 96)
    assert got["train_s"] == 1.0


@pytest.mark.skipif(pytest.importorskip("trl") is None, reason="trl not installed")
def test_trl_runs_one_step_and_leaves_a_snapshot(tiny_model, tmp_path):
    from vs_trl import settings
    from vs_trl.evaluate import pass_at_1
    from vs_trl.task import Task

    task = Task.load("builtin", overrides={"learn.groups_per_step": 2, "learn.group_size": 4})
    spec = {"model": "builtin", "model_dir": str(tiny_model), "out": str(tmp_path), "threads": 1,
            "budget_s": 0.0, "launched": time.time(), "keep_every": 1, "trl_args": settings.trl_args(task.cfg)}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "bench"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    subprocess.run([sys.executable, "-m", "vs_trl.run_trl", str(tmp_path / "spec.json")], env=env, check=True,
                   timeout=300, capture_output=True)
    run = json.loads((tmp_path / "trl_run.json").read_text())
    assert run["steps"] == 1 and run["samples_generated"] == 8
    assert [s["step"] for s in run["snapshots"]] == [1]
    assert 0 <= run["generate_s"] and 0 <= run["train_s"]
    assert 0.0 <= pass_at_1(tiny_model, Path(run["snapshots"][0]["path"]), task, prompts=2, n=2) <= 1.0


def test_limit_loop_measures_the_batch(tiny_model):
    from vs_trl.limit import learner_limit

    got = learner_limit(tiny_model, rows=4, prompt_len=6, completion_len=3, threads=1, steps=1, warmup=0)
    assert got["rows"] == 4 and got["step_s_median"] > 0
    assert got["tokens_trained_per_s"] == pytest.approx(12 / got["step_s_median"], rel=0.01)


def test_limit_keeps_the_fastest_thread_count(tiny_model):
    from vs_trl.limit import best_limit

    got = best_limit(tiny_model, rows=2, prompt_len=4, completion_len=2, threads=2, steps=1, warmup=0)
    assert set(got["step_s_median_by_threads"]) == {1, 2}
    assert got["step_s_median"] == min(got["step_s_median_by_threads"].values())


def test_figures_and_ratios():
    from vs_trl import report

    curve = [{"t": 50.0, "step": 25, "pass_at_1": 0.25}, {"t": 100.0, "step": 50, "pass_at_1": 0.36},
             {"t": 150.0, "step": 75, "pass_at_1": 0.41}]
    assert report.time_to_gain(curve, 0.20, 10) == 50.0 + 50.0
    assert report.time_to_gain(curve, 0.20, 20) == 150.0
    assert report.time_to_gain(curve, 0.20, 30) is None
    assert report.pass_at(curve, 0.20, 10.0) == 0.20 and report.pass_at(curve, 0.20, 120.0) == 0.36
    run = {"wall_s": 200.0, "curve": curve, "train_s": 50.0, "steps": 75, "samples_generated": 400,
           "samples_trained": 200, "tokens_generated": 1200, "tokens_trained": 600, "peak_rss_mib": 900.0}
    f = report.figures(run, 0.20, [100.0], limit_tokens_per_s=30.0)
    assert (f["learner_share"], f["tokens_trained_per_s"], f["of_limit_overall"]) == (0.25, 3.0, 0.1)
    assert f["of_limit_while_training"] == 0.4
    med = report.median_figures([f, {**f, "time_to_plus20_s": None}])
    assert med["time_to_plus20_s"] is None and med["learner_share"] == 0.25
    assert report.ratios({"a": 2.0, "b": None}, {"a": 4.0, "b": 1.0}) == {"a": 0.5}


def test_profile_splits_the_learners_wall_time(tmp_path):
    from vs_trl import profile

    launched = 1000.0
    traces = tmp_path / "traces"
    traces.mkdir()
    spans = [{"name": "learn.step", "start_ns": int((launched + 12 + i) * 1e9), "end_ns": int((launched + 12.5 + i) * 1e9)}
             for i in range(4)]
    (traces / "learn-learn-0.jsonl").write_text("\n".join(map(json.dumps, [{"config": {}}, *spans])) + "\nnot json\n")
    gen = [{"name": "rollout.generate", "start_ns": 0, "end_ns": int(0.25e9)}] * 2
    (traces / "rollout-rollout-0.jsonl").write_text("\n".join(map(json.dumps, gen)) + "\n")
    got = profile.span_totals(tmp_path)
    assert got["learn-learn-0"]["learn.step"]["n"] == 4 and got["learn-learn-0"]["learn.step"]["total_s"] == 2.0
    run = {"steps": 4, "wall_s": 20.0, "train_s": 2.0, "wait_s": 1.0, "publish_s": 0.2}
    b = profile.breakdown(run, got, launched)
    assert (b["startup_s"], b["other_s"], b["train_per_step_s"], b["generate_per_call_s"]) == (12.0, 4.8, 0.5, 0.25)


def test_a_set_override_reaches_both_frameworks_and_the_report(tmp_path):
    import importlib.util

    from rlvr.cli.commands.up import parse_sets
    from vs_trl import run_rlvr, settings
    from vs_trl.task import Task

    sets = ["learn.dynamic_sampling=true", "learn.engine.optimizer.lr=5e-5"]  # the built-in config has it off
    spec = importlib.util.spec_from_file_location("vs_trl_script", REPO / "bench" / "vs_trl.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    args = script.parse_args(["--set", sets[0], "--set", sets[1], "--work", str(tmp_path)])
    cfg = Task.load("builtin", overrides=parse_sets(args.set)).cfg
    assert settings.trl_args(cfg)["learning_rate"] == 5e-5  # TRL's settings come from the same config
    assert settings.differences(cfg)[0][1].startswith("on")
    assert settings.differences(Task.load("builtin").cfg)[0][1].startswith("off")
    cmd = run_rlvr.up_command(tmp_path / "c.json", tmp_path / "run", args.set)
    assert cmd[cmd.index("up"):][-4:] == ["--set", sets[0], "--set", sets[1]]  # and rlvr-actor's `up`
