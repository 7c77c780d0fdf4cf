"""The dry run's checks of ``[rollout.agent]``: what would stop the rollout at start, or end every episode
``env_error``, found before anything starts (docs/agents.md, "Train your agent").

- A **callable** is imported as the rollout imports it (``runner.load_callable``, in this process, with
  this process's ``PYTHONPATH``, as plug-ins are) and must be an async function.
- A **command**'s program is resolved as the runner resolves it (``config.resolve_program``: a bare
  ``python`` is the interpreter running the rollout). A Python program is then started, with the
  environment and working directory an episode would give it, to show that it runs, that its script (or
  ``-m`` module) is there and parses, and that every module the script imports at its top level is found
  by that interpreter: an SDK missing from it fails every episode with ``ModuleNotFoundError``. The script
  itself is not run (it would start an episode with no endpoint); an import inside a ``try``, a function
  or an ``if`` is not checked (it may be optional). Another program is only checked to exist and be
  executable: nothing says how to start it without an episode.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from rlvr.cli.plan.checks import Finding

PROBE_TIMEOUT_S = 60.0  # an interpreter start and a few find_spec calls, on a busy machine
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_OPTION_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")

# Run by the agent's own interpreter: argv is [kind, target]; prints one JSON line.
_PROBE = r"""
import ast, importlib.util, json, os, sys
kind, target = sys.argv[1], sys.argv[2]
out = {"missing": [], "error": None}
try:
    if kind == "module":
        spec = importlib.util.find_spec(target)
        if spec is None or not spec.origin or not os.path.isfile(spec.origin):
            raise LookupError(f"no module {target!r} on this interpreter's path")
        source, where = open(spec.origin, "rb").read(), spec.origin
    elif kind == "script":
        if not os.path.isfile(target):
            raise LookupError(f"no script {target!r} (relative to the agent's working directory {os.getcwd()!r})")
        if sys.path and sys.path[0] == "":
            sys.path.pop(0)  # a script's path starts at its own folder, not the working directory
        if not getattr(sys.flags, "safe_path", False):
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        source, where = open(target, "rb").read(), target
    else:
        source, where = target, "<-c>"
    for node in ast.parse(source, where).body:
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
        out["missing"] += [n for n in names if importlib.util.find_spec(n.split(".")[0]) is None]
except (LookupError, OSError, SyntaxError, ValueError) as e:
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def check_agent(cfg) -> list[Finding]:
    """The agent's callable imports, or its command's program exists (and, for Python, runs and finds its
    script and the modules it imports)."""
    agent = cfg.rollout.agent
    if agent is None:
        return []
    if agent.callable:
        return [_check_callable(agent)]
    return _check_command(agent)


def _check_callable(agent) -> Finding:
    from rlvr.rollout.agents.config import AgentConfigError
    from rlvr.rollout.agents.runner import load_callable

    key = "rollout.agent.callable"
    try:
        load_callable(agent.callable)
    except AgentConfigError as e:
        return Finding(key, False, f"{str(e).removeprefix(key + ': ')} (on the rollout role's PYTHONPATH?)")
    return Finding(key, True, f"{agent.callable} imports, an async function")


def _check_command(agent) -> list[Finding]:
    from rlvr.rollout.agents.config import AgentConfigError, resolve_program

    key = "rollout.agent.command"
    try:
        program = resolve_program(agent)
    except AgentConfigError as e:
        named, _, why = str(e).partition(": ")  # the error names its key first
        return [Finding(named, False, why)]
    said = program if program == agent.command[0] else f"{program} (for {agent.command[0]!r})"
    if not _is_python(program):
        return [Finding(key, True, f"{said}: an executable program (not started: it needs an episode)")]
    flags, kind, target = _python_target(agent.command[1:])
    if kind is None:
        return [Finding(key, False, f"{said} with no script, -m module or -c code: it would read the task on stdin "
                                    "as its program")]
    what = {"script": target, "module": f"-m {target}", "code": "-c code"}[kind]
    try:
        ran = subprocess.run([program, *flags, "-c", _PROBE, kind, target], env=_agent_env(agent),
                             cwd=agent.cwd or None, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return [Finding(key, False, f"{said} did not answer within {PROBE_TIMEOUT_S:g}s")]
    except OSError as e:
        return [Finding(key, False, f"{said} does not start: {e}")]
    try:
        found = json.loads(ran.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = ran.stderr.strip()[-500:] or "no output"
        return [Finding(key, False, f"{said} does not run with the agent's environment (exit {ran.returncode}): "
                                    f"{tail}")]
    if found["error"]:
        return [Finding(key, False, f"{said}, {what}: {found['error']}")]
    if found["missing"]:
        return [Finding(key, False, f"{said} cannot import {', '.join(found['missing'])}, which {what} imports: "
                                    "every episode would end env_error (install it there, or name the "
                                    "interpreter that has it)")]
    return [Finding(key, True, f"{said} runs {what}, and finds every module it imports at its top level")]


def _is_python(program: str) -> bool:
    return program == sys.executable or bool(_PYTHON.match(os.path.basename(program)))


def _python_target(args: list[str]) -> tuple[list[str], str | None, str]:
    """(the interpreter's own options, "script" | "module" | "code" | None, the script, module or code)."""
    flags: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-m", "-c"):
            return flags, "module" if a == "-m" else "code", args[i + 1] if i + 1 < len(args) else ""
        if a in _OPTION_WITH_VALUE:
            flags += args[i:i + 2]
            i += 2
            continue
        if a == "-" or not a.startswith("-"):
            return flags, (None if a == "-" else "script"), a
        flags.append(a)
        i += 1
    return flags, None, ""


def _agent_env(agent) -> dict[str, str]:
    """The environment an episode gives the agent (``runner.episode_env``), its endpoint unreachable."""
    from rlvr.rollout.agents.runner import AgentClient, episode_env

    nowhere = "http://127.0.0.1:9"
    client = AgentClient(openai_base_url=nowhere + "/v1", anthropic_base_url=nowhere, api_key="plan",
                         reward_url=nowhere + "/v1/rlvr/reward", model=agent.model_name, episode_id="plan",
                         max_requests=agent.max_requests, max_tokens=agent.max_tokens, timeout_s=agent.timeout_s)
    return episode_env(agent, client, None)


__all__ = ["check_agent"]
