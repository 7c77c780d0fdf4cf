"""``rlvr-actor plan`` checks the agent as the rollout will start it (docs/agents.md, "Train your agent"): a
callable that does not import, or is no async function, and a command whose program is missing, whose
script is missing, or whose interpreter lacks a module the script imports are refused, each naming its key;
what the rollout would run is accepted. Every agent here is a real file on disk and every interpreter a
real one: the rollout's own, and a virtual environment made without the SDKs."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.cli.test_plan import plan
from tests.conftest import REPO


def _write(folder: Path, name: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(source)
    return folder / name


def _plan_agent(capsys, monkeypatch, folder: Path, agent: str) -> tuple[int, str]:
    monkeypatch.setenv("PYTHONPATH", str(folder))  # as the rollout role would be started: PYTHONPATH=...
    monkeypatch.syspath_prepend(str(folder))
    # The guide's example with another agent: its model has the chat template an agent needs.
    return plan(capsys, "--config", str(REPO / "examples/agent_calc.toml"), "--set", f"rollout.agent={{{agent}}}")


def _line(out: str, key: str) -> str:
    return next(x for x in out.splitlines() if x.split(":")[0].endswith(key))


def test_plan_refuses_an_agent_callable_whose_module_does_not_exist(capsys, monkeypatch, tmp_path):
    rc, out = _plan_agent(capsys, monkeypatch, tmp_path, 'callable = "no_such_agent_pkg_b44.agent:solve"')
    assert rc == 1, out
    line = _line(out, "rollout.agent.callable")
    assert line.startswith("FAIL") and "no_such_agent_pkg_b44" in line and "ModuleNotFoundError" in line, line
    assert "verdict: the run cannot start" in out


def test_plan_refuses_a_callable_whose_module_fails_on_its_own_import(capsys, monkeypatch, tmp_path):
    _write(tmp_path, "agent_sdk_missing_b44.py", "import no_such_sdk_b44\n\nasync def solve(client, task):\n"
                                                 "    return '1'\n")
    rc, out = _plan_agent(capsys, monkeypatch, tmp_path, 'callable = "agent_sdk_missing_b44:solve"')
    assert rc == 1
    assert "no_such_sdk_b44" in _line(out, "rollout.agent.callable")


def test_plan_refuses_a_callable_that_is_no_async_function(capsys, monkeypatch, tmp_path):
    _write(tmp_path, "agent_sync_b44.py", "def solve(client, task):\n    return '1'\n")
    rc, out = _plan_agent(capsys, monkeypatch, tmp_path, 'callable = "agent_sync_b44:solve"')
    assert rc == 1
    assert "is not an async function" in _line(out, "rollout.agent.callable")


def test_plan_accepts_a_callable_that_imports(capsys, monkeypatch, tmp_path):
    _write(tmp_path, "agent_ok_b44.py", "import openai\n\nasync def solve(client, task):\n    return '1'\n")
    rc, out = _plan_agent(capsys, monkeypatch, tmp_path, 'callable = "agent_ok_b44:solve"')
    assert rc == 0, out
    assert _line(out, "rollout.agent.callable").startswith("ok")


def test_plan_refuses_a_command_whose_program_does_not_exist(capsys, monkeypatch, tmp_path):
    rc, out = _plan_agent(capsys, monkeypatch, tmp_path, 'command = ["no-such-agent-program-b44"]')
    assert rc == 1
    assert "is not an executable program" in _line(out, "rollout.agent.command")


def test_plan_refuses_a_python_command_whose_script_is_not_there(capsys, monkeypatch, tmp_path):
    rc, out = _plan_agent(capsys, monkeypatch, tmp_path, f'command = ["python", "{tmp_path}/missing.py"]')
    assert rc == 1
    assert "no script" in _line(out, "rollout.agent.command")


def test_plan_refuses_a_python_command_that_imports_what_its_interpreter_lacks(capsys, monkeypatch, tmp_path):
    script = _write(tmp_path, "agent.py", "import json\nimport openai\nimport no_such_sdk_b44.client\n"
                                          "print(json.dumps({'answer': '1'}))\n")
    rc, out = _plan_agent(capsys, monkeypatch, tmp_path, f'command = ["python", "{script}"]')
    assert rc == 1
    line = _line(out, "rollout.agent.command")
    assert "cannot import no_such_sdk_b44.client" in line and "openai" not in line.split("cannot import")[1], line


def test_plan_checks_a_python_command_s_imports_with_the_interpreter_it_names(capsys, monkeypatch, tmp_path):
    # A virtual environment without the SDKs: `openai` is found by the rollout's interpreter, not by this one.
    env = tmp_path / "agent-venv"
    venv.create(env, with_pip=False)
    other = env / "bin" / "python"
    subprocess.run([str(other), "-c", "import sys"], check=True)
    script = _write(tmp_path, "agent.py", "import openai\nprint(openai.__name__)\n")
    rc, out = _plan_agent(capsys, monkeypatch, tmp_path, f'command = ["{other}", "{script}"]')
    assert rc == 1
    assert "cannot import openai" in _line(out, "rollout.agent.command")
    rc, out = _plan_agent(capsys, monkeypatch, tmp_path, f'command = ["python", "{script}"]')
    assert rc == 0, out
    line = _line(out, "rollout.agent.command")
    assert line.startswith("ok") and sys.executable in line, line


@pytest.mark.parametrize("how", ["module", "script in cwd"])
def test_plan_accepts_a_python_command_as_the_rollout_would_start_it(how, capsys, monkeypatch, tmp_path):
    folder = tmp_path / "agents"
    _write(folder, "agent_mod_b44.py", "import json\nimport anthropic\nprint(json.dumps({'answer': '1'}))\n")
    agent = ('command = ["python3", "-u", "-m", "agent_mod_b44"]' if how == "module" else
             f'command = ["python", "agent_mod_b44.py"], cwd = "{folder}"')
    rc, out = _plan_agent(capsys, monkeypatch, folder, agent)
    assert rc == 0, out
    assert _line(out, "rollout.agent.command").startswith("ok")
