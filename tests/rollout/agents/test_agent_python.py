"""A command agent whose program is a bare ``python`` or ``python3`` runs under the interpreter that runs the
rollout, not the first ``python`` on ``PATH`` (docs/agents.md, "Train your agent"): the example's own
commented-out command (examples/agent_calc.toml), with a ``python`` that is not the rollout's first on the
PATH the agent inherits, plays its episode on the real ``openai`` SDK. A path names any other interpreter."""

from __future__ import annotations

import os
import re
import shutil
import sys
import tomllib

import msgspec
import pytest

from rlvr.protocol import SamplingParams
from rlvr.protocol.tasks import ChatMessage
from rlvr.rollout.agents.config import AgentConfig, resolve_program
from rlvr.rollout.agents.runner import AgentRunner
from tests.conftest import REPO
from tests.factories import make_task
from tests.rollout.agents.conftest import ScriptedEngine
from tests.rollout.chat_tokenizers import chat_tokenizer


def _example_command() -> list[str]:
    text = (REPO / "examples/agent_calc.toml").read_text()
    return tomllib.loads(re.search(r"^# (command = \[.*\])$", text, re.M).group(1))["command"]


@pytest.fixture
def other_python_first(tmp_path, monkeypatch):
    """A ``python`` and a ``python3`` first on PATH that are not the rollout's (they lack everything)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("python", "python3"):
        (folder / name).write_text("#!/bin/sh\necho 'not the rollout interpreter' >&2\nexit 3\n")
        (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


@pytest.mark.parametrize("program", ["python", "python3"])
def test_the_example_s_command_runs_under_the_rollout_s_interpreter(program, other_python_first, loop):
    from rlvr.rollout.agents.endpoint import AgentEndpoint

    command = _example_command()
    assert command[0] == "python"
    cfg = AgentConfig(command=[program, *command[1:]], cwd=str(REPO), timeout_s=60)
    engine = ScriptedEngine(chat_tokenizer("qwen2.5"), ["4130"])
    endpoint = AgentEndpoint(engine, sampling=SamplingParams(max_tokens=16), tool_format="hermes")
    task = msgspec.structs.replace(make_task(prompt=[ChatMessage("user", "70*59=")]),
                                   sampling=SamplingParams(max_tokens=16))
    loop.run(endpoint.start())
    try:
        runner = AgentRunner(cfg, endpoint)
        out = loop.run(runner.play(task, 0), timeout=120)
    finally:
        loop.run(endpoint.stop())
    assert out.episode.end_reason == "done", out.episode.detail
    assert out.text == "4130"
    assert runner.program == sys.executable


def test_a_path_names_another_interpreter_and_a_bare_name_is_looked_up_on_path(other_python_first):
    assert resolve_program(AgentConfig(command=[str(other_python_first / "python"), "a.py"])) == str(
        other_python_first / "python")
    assert resolve_program(AgentConfig(command=["sh", "-c", "true"])) == shutil.which("sh")
