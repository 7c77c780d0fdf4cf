"""Agent episodes end to end through ``rlvr-actor up`` with the HF engine: command agents on the real
``openai`` client (sync, streaming and not, with tools) and the real ``anthropic`` client play every task;
some crash and some hang (forking a daemon that leaves their process group). The run trains its steps, the
failed episodes are recorded with their end reasons and dropped (never scored 0), the trained samples hold the
model's tokens with the agent's masked, and no process an agent started is left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

# Sample 0 of every task: the openai client with a tool, a plain request then a streamed one. Sample 1: the
# anthropic client, streamed; except on tasks whose index is 1 mod 3 (it crashes) or 2 mod 3 (it forks a
# daemon that leaves its group, notes its pids, and hangs).
AGENT = '''
import json, os, sys, time
task = json.load(sys.stdin)
messages = list(task["messages"])
if task["sample_index"] == 0:
    import openai
    client = openai.OpenAI(max_retries=0)
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
    for stream in (False, True):
        if stream:
            text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
                model="m", messages=messages, tools=tools, stream=True))
        else:
            text = client.chat.completions.create(model="m", messages=messages, tools=tools).choices[0].message.content
        messages += [{"role": "assistant", "content": text or ""}, {"role": "user", "content": "Once more."}]
    print(text.strip() or "0")
    sys.exit(0)
if task["index"] % 3 == 1:
    sys.stderr.write("crashed on purpose\\n")
    sys.exit(5)
if task["index"] % 3 == 2:
    if os.fork() == 0:
        os.setsid()
        if os.fork():
            os._exit(0)
        with open(os.path.join(os.environ["PID_DIR"], str(os.getpid())), "w"):
            pass
        time.sleep(1000)
    open(os.path.join(os.environ["PID_DIR"], str(os.getpid())), "w").close()
    time.sleep(1000)
import anthropic
with anthropic.Anthropic(max_retries=0).messages.stream(model="c", max_tokens=99, messages=messages) as s:
    print("".join(b.text for b in s.get_final_message().content if b.type == "text").strip() or "0")
'''


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from rlvr.learner.example.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("m") / "tiny", hidden=64, layers=1, heads=2)


def _config(tmp_path: Path, model: Path) -> dict:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    (tmp_path / "pids").mkdir()
    return {
        "run": "agentup", "seed": 0,
        "rollout": {
            "engine": {"kind": "hf", "model": str(model), "max_prompt_tokens": 2048},
            "max_inflight_tasks": 4,
            "agent": {"command": [sys.executable, str(agent)], "timeout_s": 8, "max_requests": 4,
                      "max_concurrent": 4, "env": {"PID_DIR": str(tmp_path / "pids")}},
        },
        "verify": {"pool_size": 1, "warm_verifiers": []},
        "learn": {
            "group_size": 2, "groups_per_step": 2, "steps": 2, "checkpoint_every": 1, "dynamic_sampling": False,
            "sampling": {"max_tokens": 8, "temperature": 1.0},
            "dataset": {"kind": "arithmetic", "holdout": 4, "verifier": {"name": "exact", "params": {"gold": "{gold}"}}},
            "eval": {"prompts": 2, "n": 2, "ks": [1, 2], "every_steps": 0},
            "engine": {"model_path": str(model), "zero_stage": 0, "bf16": False, "gradient_checkpointing": False,
                       "micro_batch_tokens": 4096, "pad_token_id": 0, "temperature": 1.0,
                       "schedule": {"type": "constant"}},
        },
        "up": {"verify_replicas": 1, "rollout_replicas": 1, "display": "plain"},
    }


def test_agent_episodes_train_through_up_failures_are_dropped_and_no_process_is_left(tiny, tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_bytes(msgspec.json.encode(_config(tmp_path, tiny)))
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "rlvr.cli", "up", "--config", str(cfg), "--run-dir", str(run_dir)],
                         capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=900,
                         cwd=REPO)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["samples_trained"] > 0
    ends = summary["episode_ends"]
    assert ends.get("done", 0) > 0 and ends.get("env_error", 0) > 0 and ends.get("env_timeout", 0) > 0, ends
    # Failed episodes are scored outcome error and dropped as failed verifications, never trained as a 0.
    assert summary["drops"].get("verify_failed", 0) > 0 and summary["verifier_outcomes"]["error"] > 0
    # Every process a hanging agent started (itself, its escaped daemon) is gone.
    pids = [int(p.name) for p in (tmp_path / "pids").iterdir()]
    assert pids and [p for p in pids if os.path.exists(f"/proc/{p}")] == []
    # What was trained: the model's turns (mask 1) and what the agent added (mask 0) in one sample.
    dumped = [json.loads(line) for f in sorted((run_dir / "samples").glob("step-*.jsonl"))
              for line in f.read_text().splitlines()]
    assert dumped and all(d["episode"]["end_reason"] not in ("env_error", "env_timeout") for d in dumped)
    assert any(0 in d["mask"] and 1 in d["mask"] for d in dumped), dumped[:1]
