"""Every code block of docs/agents.md runs, read from the page itself (docs/agents.md, "Tested with"):

- each python block is an agent whose first line names its file and how the config names it
  (``# anthropic_agent.py, named as callable = "anthropic_agent:solve"``); it is written there and played
  through ``AgentRunner`` exactly so, on the real ``openai``/``anthropic`` SDK against the endpoint, with a
  model whose words are fixed (a tiny random model writes no answer) and a real chat template (Qwen2.5's);
- each toml block is loaded as a config and ``plan`` accepts it;
- each bash line runs as a user types it: ``plan`` as it is; ``up`` with the example shrunk to one step
  (slow).

The guide's tables of the callable's ``client`` and of ``task`` are the whole of what the runner hands
over: a name the page gives that the code lacks (``client.base_url`` once) sends a user's agent to an
AttributeError on every episode.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import msgspec
import pytest

from rlvr.protocol import SamplingParams
from rlvr.protocol.tasks import ChatMessage
from rlvr.rollout.agents.config import AgentConfig
from rlvr.rollout.agents.runner import AgentClient, AgentRunner, task_json
from tests.conftest import REPO
from tests.doc_blocks import Block, code_blocks
from tests.factories import make_task
from tests.rollout.agents.conftest import ScriptedEngine
from tests.rollout.chat_tokenizers import chat_tokenizer

GUIDE = "docs/agents.md"
_HEADER = re.compile(r"^# ([\w.]+\.py), (?:named|run) as (callable|command) = (.+)$")
# The example's `up`, shrunk to one step of two groups on a model warmed up for two SFT steps.
_SHRINK = ["--display", "plain", "--set", "learn.steps=1", "--set", "learn.groups_per_step=2",
           "--set", "learn.group_size=2", "--set", "learn.dynamic_sampling=false", "--set", "learn.eval.prompts=0",
           "--set", "learn.prepare.hidden=32", "--set", "learn.prepare.heads=1", "--set", "learn.prepare.layers=1",
           "--set", "learn.prepare.sft_max_steps=2", "--set", "learn.prepare.sft_check_every=2",
           "--set", "up.verify_replicas=1"]


def _table_names(text: str, header: str) -> list[str]:
    """The first column's `names` of the markdown table whose header row is ``header``."""
    rows = text.split(header, 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    return [re.match(r"\| `(\w+)` \|", r).group(1) for r in rows]


def test_the_guide_names_every_attribute_of_the_client_and_every_key_of_the_task_and_nothing_else():
    text = (REPO / GUIDE).read_text()
    assert _table_names(text, "| attribute | what |") == list(AgentClient.__struct_fields__)
    task = task_json(make_task(), 0, "t-t0/0", AgentConfig(callable="m:f"), "rlvr-policy")
    assert sorted(_table_names(text, "| key | what |")) == sorted(task)
    assert "`{\"max_requests\": ..., \"max_tokens\": ..., \"timeout_s\": ...}`" in text
    assert sorted(task["limits"]) == ["max_requests", "max_tokens", "timeout_s"]


def _agent_blocks() -> list[Block]:
    return code_blocks(GUIDE, "python")


def test_every_python_block_of_the_guide_says_how_the_config_names_it():
    assert len(_agent_blocks()) >= 3
    for block in _agent_blocks():
        assert _HEADER.match(block.text.splitlines()[0]), block.id


@pytest.mark.parametrize("block", _agent_blocks(), ids=lambda b: b.id)
def test_each_agent_of_the_guide_plays_an_episode_as_the_rollout_runs_it(block, loop, tmp_path, monkeypatch):
    from rlvr.rollout.agents.endpoint import AgentEndpoint

    file, kind, value = _HEADER.match(block.text.splitlines()[0]).groups()
    (tmp_path / file).write_text(block.text)
    named = tomllib.loads(f"v = {value}")["v"]
    if kind == "callable":
        monkeypatch.syspath_prepend(str(tmp_path))
        importlib.invalidate_caches()
        cfg = AgentConfig(callable=named, timeout_s=60)
    else:
        cfg = AgentConfig(command=named, cwd=str(tmp_path), timeout_s=60)
    engine = ScriptedEngine(chat_tokenizer("qwen2.5"), ["The answer is 5."])
    endpoint = AgentEndpoint(engine, sampling=SamplingParams(max_tokens=64), tool_format="hermes")
    task = msgspec.structs.replace(make_task(prompt=[ChatMessage("system", "You add."), ChatMessage("user", "2+3?")]),
                                   sampling=SamplingParams(max_tokens=64))
    loop.run(endpoint.start())
    try:
        out = loop.run(AgentRunner(cfg, endpoint).play(task, 0), timeout=120)
    finally:
        loop.run(endpoint.stop())
    e = out.episode
    assert e.end_reason == "done", e.detail
    assert out.text == "The answer is 5." and len(e.turns) == 1
    said = endpoint.codec.decode(out.prompt_ids)
    assert "You add." in said and "2+3?" in said  # the task's messages reached the model, the system one too


@pytest.mark.parametrize("block", code_blocks(GUIDE, "toml"), ids=lambda b: b.id)
def test_each_config_of_the_guide_loads_and_plan_accepts_it(block, tmp_path, monkeypatch, capsys):
    from rlvr.cli.main import main

    monkeypatch.syspath_prepend(str(REPO / "examples" / "agent_calc"))  # the guide's callable, calc_agent:solve
    path = tmp_path / "guide.toml"
    path.write_text(block.text)
    rc = main(["plan", "--quiet-config", "--config", str(path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "ok   rollout.agent." in out


def _bash_lines(command: str) -> list[str]:
    return [line for b in code_blocks(GUIDE, "bash") for line in b.text.splitlines()
            if line.strip() and not line.startswith("#") and f"rlvr-actor {command} " in line]


def _run(line: str, extra: list[str], timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}", OMP_NUM_THREADS="1")
    return subprocess.run(["bash", "-c", line + "".join(" " + shlex.quote(a) for a in extra)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("line", _bash_lines("plan"))
def test_the_guide_s_plan_command_runs_and_says_the_run_can_start(line):
    done = _run(line, ["--quiet-config"], timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ok   rollout.agent.callable: calc_agent:solve imports" in done.stdout
    assert "verdict: the run can start" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("line", _bash_lines("up"))
def test_the_guide_s_up_command_trains_the_example_agent(line, tmp_path: Path):
    done = _run(line, [*_SHRINK, "--run-dir", str(tmp_path / "run")], timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["samples_trained"] == 2 * 2
    assert summary["episode_ends"].get("done", 0) >= 2 * 2  # the example's agent played them
