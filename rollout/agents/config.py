"""``[rollout.agent]``: the agent program a rollout replica runs for every episode (docs/agents.md).

The agent is named here, in the rollout role's own config, and nowhere else: a
task never chooses what runs. It is a ``command`` (a program started per
episode) or a ``callable`` (``"package.module:function"``, an async Python
function imported once at start-up), never both. Everything is checked when the
config is decoded, and a bad value is an error naming its key
(``rollout.agent.<key>``); what can only be checked on the machine that runs
the agent (the program exists: ``resolve_program``; the callable imports:
``runner.load_callable``) is checked when the role starts
(``rollout/agents/runner.py``) and by ``rlvr-actor plan`` (``cli/plan/agent_checks.py``).

A bare ``python`` or ``python3`` as the command's program is the interpreter that
runs the rollout (``sys.executable``), not the first one on ``PATH``: the agent
then imports what the rollout's environment has installed (the SDKs), which is
what a user who writes ``["python", "my_agent.py"]`` means. A path names any other.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import sys
from typing import Annotated, Literal

from msgspec import Meta, Struct

_CALLABLE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
                       r"[A-Za-z0-9])?)*$")
# Set by the runner for every command agent: a config may not override them (docs/agents.md, "Environment").
RESERVED_ENV = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "RLVR_EPISODE_ID",
                "RLVR_TASK_FILE", "RLVR_REWARD_URL", "RLVR_MODEL", "RLVR_MAX_REQUESTS", "RLVR_MAX_TOKENS",
                "RLVR_TIMEOUT_S")
# What a command agent inherits from the replica's environment unless ``pass_env`` says otherwise: enough to
# find programs and Python packages, never the replica's secrets (NATS credentials, tracker tokens).
DEFAULT_PASS_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "OMP_NUM_THREADS")


class AgentConfigError(ValueError):
    """A bad ``[rollout.agent]`` value; the message names the key."""


class AgentConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """The agent a replica runs: every task without an ``env`` is played as ``n`` episodes of it."""

    # A program started for each episode, as an argument list: ["python", "my_agent.py"] (a bare
    # "python" or "python3" is the interpreter that runs the rollout; a path names another). It
    # finds the endpoint in OPENAI_BASE_URL / ANTHROPIC_BASE_URL and its episode key in
    # OPENAI_API_KEY / ANTHROPIC_API_KEY, reads the task (JSON) from stdin or RLVR_TASK_FILE, and
    # prints its answer as the last line of stdout (or a JSON object {"answer": ..., "reward": ...}).
    command: list[str] = []
    # Or an async Python function "package.module:function", called (client, task) -> answer
    # (a string, or {"answer": ..., "reward": ...}); imported once when the role starts.
    callable: str = ""
    # Requests (model turns) one episode may send; the next one is refused and the agent stopped
    # (end reason max_turns).
    max_requests: Annotated[int, Meta(gt=0, le=256)] = 16
    # Tokens the model may generate in one episode, all requests together; past them the agent
    # is stopped (end reason token_budget).
    max_tokens: Annotated[int, Meta(gt=0)] = 4096
    # Wall-clock seconds one episode may take; past them the agent is stopped (end reason env_timeout).
    timeout_s: Annotated[float, Meta(gt=0)] = 300.0
    # Episodes one replica runs at once (across all its tasks); the rest wait their turn.
    max_concurrent: Annotated[int, Meta(gt=0, le=4096)] = 16
    # Where a command agent finds its task: "stdin", "file" (a path in RLVR_TASK_FILE), or both.
    task_via: tuple[Literal["stdin", "file"], ...] = ("stdin", "file")
    # Fields of the task's dataset record handed to the agent in task["record"]. None by
    # default: a record may hold the gold answer, which must never reach the agent.
    record_keys: list[str] = []
    # Variables a command agent inherits from the replica's environment (only these).
    pass_env: tuple[str, ...] = DEFAULT_PASS_ENV
    # More variables set for a command agent (its own settings; not OPENAI_/ANTHROPIC_ base URLs and
    # keys, nor RLVR_*: the rollout sets those for each episode).
    env: dict[str, str] = {}
    # Working directory of a command agent ("" = the replica's).
    cwd: str = ""
    # Address the endpoint binds. Loopback by default: only this machine reaches it. To serve
    # agents elsewhere see docs/agents.md, "Agents on other machines".
    host: str = "127.0.0.1"
    # Port of the endpoint (0 = any free port; each replica needs its own).
    port: Annotated[int, Meta(ge=0, le=65535)] = 0
    # The model's name in GET /v1/models and in responses (any name an agent asks for is served).
    model_name: Annotated[str, Meta(min_length=1, max_length=128)] = "rlvr-policy"

    def __post_init__(self) -> None:
        if bool(self.command) == bool(self.callable):
            raise AgentConfigError("rollout.agent: set exactly one of command (a program per episode) or callable "
                                   "(\"package.module:function\")")
        if self.command and not all(isinstance(a, str) and a for a in self.command):
            raise AgentConfigError("rollout.agent.command: every argument must be a non-empty string")
        if self.callable and not _CALLABLE.match(self.callable):
            raise AgentConfigError(f"rollout.agent.callable: {self.callable!r} is not \"package.module:function\"")
        if not self.task_via:
            raise AgentConfigError("rollout.agent.task_via: give \"stdin\", \"file\" or both")
        for name in self.pass_env:
            if not _ENV_NAME.match(name):
                raise AgentConfigError(f"rollout.agent.pass_env: {name!r} is not an environment variable name")
        for name in self.env:
            if not _ENV_NAME.match(name):
                raise AgentConfigError(f"rollout.agent.env: {name!r} is not an environment variable name")
            if name in RESERVED_ENV or name.startswith("RLVR_"):
                raise AgentConfigError(f"rollout.agent.env: {name} is set by the rollout for each episode")
        if any(not k for k in self.record_keys):
            raise AgentConfigError("rollout.agent.record_keys: a key must not be empty")
        if not _valid_host(self.host):
            raise AgentConfigError(f"rollout.agent.host: {self.host!r} is not an IP address or host name")

    @property
    def name(self) -> str:
        """The agent's name in ``Episode.environment``: the callable, or the command's program and script."""
        return (self.callable or " ".join(self.command[:2]))[-120:]


# Programs that mean "the interpreter running the rollout" (the module docstring says why).
ROLLOUT_PYTHON = ("python", "python3")


def resolve_program(cfg: AgentConfig) -> str:
    """The path of the command's program as the runner starts it (``AgentConfigError`` naming the key when
    it is not there): a bare ``python``/``python3`` is ``sys.executable``, another bare name is looked up on
    ``PATH``, a path is taken relative to ``cwd``."""
    if cfg.cwd and not os.path.isdir(cfg.cwd):
        raise AgentConfigError(f"rollout.agent.cwd: {cfg.cwd!r} is not a directory")
    prog = cfg.command[0]
    if prog in ROLLOUT_PYTHON:
        return sys.executable
    if os.sep not in prog:
        found = shutil.which(prog)
    else:
        found = prog if os.access(os.path.join(cfg.cwd, prog) if cfg.cwd else prog, os.X_OK) else None
    if found is None:
        raise AgentConfigError(f"rollout.agent.command: {prog!r} is not an executable program on this replica")
    return found


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOSTNAME.match(host))


__all__ = ["DEFAULT_PASS_ENV", "RESERVED_ENV", "ROLLOUT_PYTHON", "AgentConfig", "AgentConfigError", "resolve_program"]
