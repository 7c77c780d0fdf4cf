"""The example configs run a few real steps on CPU.

The shipped configs point at real models (a local Qwen2.5 or the converted
SmolLM2); here each CPU-able one keeps its dataset, verifiers, sandbox and
algorithm settings, and swaps only the model for a tiny one built in the
test, the engine for `hf`, and the lengths and counts for a few quick steps.
That exercises each example's real plumbing end to end (adapters, verifier
specs, the code sandbox) through `rlvr-actor up`. The GPU config is only
loaded (tests/test_examples.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from rlvr.cli.run_config import load_config
from tests.conftest import REPO

CPU_EXAMPLES = ["gsm8k.toml", "math.toml", "code.toml", "smollm2.toml", "smollm2_lora.toml", "byo.toml",
                "reasoning_gym.toml", "calculator.toml", "chain.toml"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from rlvr.learner.example.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("m") / "tiny", hidden=64, layers=1, heads=2)


def _shrink(path: Path, model: Path) -> dict:
    raw = msgspec.to_builtins(load_config(path))
    raw["run"] = path.stem
    raw["rollout"]["engine"] = {"kind": "hf", "model": str(model), "max_prompt_tokens": 2048}
    raw["rollout"]["max_inflight_tasks"] = 4
    learn = raw["learn"]
    learn.update(steps=2, groups_per_step=2, group_size=2, checkpoint_every=1, max_inflight_tasks=0,
                 dynamic_sampling=False, prepare=None)
    learn["sampling"]["max_tokens"] = 8
    learn["eval"].update(prompts=2, n=2, ks=[1, 2], every_steps=0)
    if learn.get("dataset", {}).get("kind") == "arithmetic":
        learn["dataset"]["holdout"] = 4
    else:
        learn["dataset"]["holdout"] = 2
    engine = learn["engine"]
    engine.update(model_path=str(model), zero_stage=0, bf16=False, gradient_checkpointing=False,
                  micro_batch_tokens=4096, ref_update_every=None, pad_token_id=0)
    engine["loss"]["kl_coef"] = 0.0
    engine["schedule"] = {"type": "constant"}
    engine["temperature"] = learn["sampling"]["temperature"]
    raw["verify"]["pool_size"] = 1
    raw["up"].update(verify_replicas=1, rollout_replicas=1, display="plain")
    if learn.get("collective"):  # weights by collective: a free port, not the example's (tests run side by side)
        address = f"127.0.0.1:{_free_port()}"
        learn["collective"]["address"] = raw["rollout"]["collective"]["address"] = address
    return raw


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("name", CPU_EXAMPLES)
def test_example_config_runs_a_few_steps(name, tiny, tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_bytes(msgspec.json.encode(_shrink(REPO / "examples" / name, tiny)))
    run_dir = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if (REPO / "examples" / Path(name).stem).is_dir():  # the example's own plug-ins (byo: my_rewards.py)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "examples" / Path(name).stem),
                                                          env.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "up", "--config", str(cfg), "--run-dir", str(run_dir)],
        capture_output=True, text=True, env=env, timeout=600, cwd=REPO,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["samples_trained"] == 2 * 2 * 2
    if name == "calculator.toml":  # what was trained can be read: an episode of the calculator, with its mask
        shown = subprocess.run([sys.executable, "-m", "rlvr.cli", "samples", str(run_dir), "--limit", "4"],
                               capture_output=True, text=True, timeout=60, cwd=REPO)
        assert shown.returncode == 0, shown.stderr
        assert "episode    calc_env:Calculator" in shown.stdout and "turn 0 · policy v" in shown.stdout
        assert "mask       1×" in shown.stdout
