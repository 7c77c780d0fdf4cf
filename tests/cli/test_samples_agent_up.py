"""What a run trained is readable whole: ``rlvr-actor up`` with an agent that compacts its history (the real
``openai`` client: two requests, then a summary in place of the history, so every episode is two segments),
the HF engine and the DeepSpeed learner on CPU; then ``rlvr-actor samples`` on its run directory.

The tokens the view counts for a step are the learner's ``tokens`` (and ``response_tokens``) for that step in
``metrics.jsonl``; every segment is shown with its own prompt, decoded from its own ids; and the turns, in the
view and in ``episode_turns_mean``, are the whole episode's."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from rlvr.cli.main import main
from tests.conftest import REPO

pytestmark = pytest.mark.slow

# Asks twice in one conversation, then compacts it to a summary and asks once more: the third request does
# not extend what was sampled, so the episode is two segments (2 model turns, then 1: the Sample's own).
AGENT = '''
import json, sys
import openai
task = json.load(sys.stdin)
client = openai.OpenAI(max_retries=0)
messages = list(task["messages"])
for k in range(2):
    text = client.chat.completions.create(model="m", messages=messages).choices[0].message.content or ""
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"Go on ({k})."}]
summary = [{"role": "system", "content": "Summary: the user asked " + task["messages"][-1]["content"]},
           {"role": "user", "content": "Answer."}]
text = client.chat.completions.create(model="m", messages=summary).choices[0].message.content or ""
print(text.strip() or "0")
'''


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    from rlvr.learner.example.tiny_model import build_tiny_model

    tmp = tmp_path_factory.mktemp("compacting")
    model = build_tiny_model(tmp / "tiny", hidden=64, layers=1, heads=2)
    (tmp / "agent.py").write_text(AGENT)
    cfg = {
        "run": "compact", "seed": 0,
        "rollout": {
            "engine": {"kind": "hf", "model": str(model), "max_prompt_tokens": 2048},
            "max_inflight_tasks": 4,
            "agent": {"command": [sys.executable, str(tmp / "agent.py")], "timeout_s": 120, "max_requests": 4,
                      "max_concurrent": 4},
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
    (tmp / "cfg.json").write_bytes(msgspec.json.encode(cfg))
    run = tmp / "run"
    out = subprocess.run([sys.executable, "-m", "rlvr.cli", "up", "--config", str(tmp / "cfg.json"), "--run-dir",
                          str(run)], capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
                         timeout=900, cwd=REPO)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run


def _steps(run_dir: Path) -> dict[int, dict]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in lines if "tokens" in r and "step" in r}


def _dump(run_dir: Path, step: int) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples" / f"step-{step:06d}.jsonl").read_text().splitlines()]


def test_the_tokens_the_view_shows_for_a_step_are_the_learner_s_tokens_for_it(run_dir, capsys):
    steps = _steps(run_dir)
    assert sorted(steps) == [1, 2]
    for step, metrics in steps.items():
        assert all(len(r["episode"]["segments"]) == 1 for r in _dump(run_dir, step))  # every episode compacted
        assert main(["samples", str(run_dir), "--step", str(step), "--limit", "0"]) == 0
        shown = re.search(r"══ step (\d+) · (\d+) samples · (\d+) sequences · (\d+) tokens trained "
                          r"\(prompt \d+ · completion \d+: policy (\d+),", capsys.readouterr().out)
        assert shown is not None
        assert int(shown[1]) == step and int(shown[2]) == metrics["samples"]
        assert int(shown[3]) == 2 * metrics["samples"]  # two sequences per episode, as the learner trained them
        assert int(shown[4]) == metrics["tokens"], (shown[0], metrics["tokens"])
        assert int(shown[5]) == metrics["response_tokens"]


def test_every_segment_is_shown_with_its_own_prompt_and_turns_count_over_the_whole_episode(run_dir, capsys):
    steps = _steps(run_dir)
    for step in steps:
        recs = _dump(run_dir, step)
        turns = [len(r["episode"]["turns"]) + sum(len(g["turns"]) for g in r["episode"]["segments"]) for r in recs]
        assert turns == [3] * len(recs)  # two model turns, compacted, one more
        assert steps[step]["episode_turns_mean"] == statistics.fmean(turns)
    rec = _dump(run_dir, 1)[0]
    # The run's tokenizer (its config's model) decodes each segment's own prompt ids.
    assert main(["samples", str(run_dir), "--episode", rec["sample_id"], "--step", "1"]) == 0
    out = capsys.readouterr().out
    assert "3 turns in 2 segments" in out
    first, own = out.split("── segment 1 of 2 ")[1].split("── segment 2 of 2 ")
    assert f"trained as {rec['sample_id']}#segment-1 · 2 turns" in first
    assert f"trained as {rec['sample_id']} · the last model turn's: what the verifier read · 1 turn" in own
    task = rec["prompt"][-1]["content"] if isinstance(rec["prompt"], list) else rec["prompt"]
    first_prompt, own_prompt = (block.split("prompt     ")[1].split("\ntokens     ")[0] for block in (first, own))
    assert task in first_prompt and "Summary" not in first_prompt  # the task's question, as the agent sent it
    assert "Summary: the user asked" in own_prompt and "Go on" not in own_prompt  # the compacted history
    assert "Go on (0)." in first  # the agent's message, masked, in the segment it was added to
