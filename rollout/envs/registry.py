"""Environment names -> classes: the built-ins and the plug-ins the rollout's own config lists.

Like the verifier registry: a task's ``EnvSpec.name`` is a built-in
(``tools``, ``openenv``, ``verifiers``) or a ``"package.module:ATTR"`` naming
an ``Environment`` subclass that ``[rollout] environments`` listed, imported
once at start-up. A message never makes the rollout import anything: an
unlisted import path is an ``EnvironmentUnknownError``, and the task is
dead-lettered with that reason.
"""

from __future__ import annotations

from collections.abc import Callable

from rlvr.actors.plugins import PluginImportError, import_attr
from rlvr.rollout.envs.base import Environment


class EnvironmentUnknownError(ValueError):
    """A task named an environment that is neither built in nor listed in [rollout] environments."""


class EnvironmentPluginError(ValueError):
    """A [rollout] environments entry that does not import or is not an Environment subclass."""


def _tools() -> type[Environment]:
    from rlvr.rollout.envs.tool_env import ToolsEnvironment

    return ToolsEnvironment


def _openenv() -> type[Environment]:
    from rlvr.rollout.envs.openenv_env import OpenEnvEnvironment

    return OpenEnvEnvironment


def _verifiers() -> type[Environment]:
    from rlvr.rollout.envs.verifiers_env import VerifiersEnvironment

    return VerifiersEnvironment


_BUILTINS: dict[str, Callable[[], type[Environment]]] = {"openenv": _openenv, "tools": _tools,
                                                         "verifiers": _verifiers}
_plugins: dict[str, type[Environment]] = {}


def load_environments(paths: list[str] | tuple[str, ...]) -> None:
    for path in paths:
        if path in _plugins:
            continue
        try:
            obj = import_attr(path)
        except PluginImportError as e:
            raise EnvironmentPluginError(f"environment plug-in {e}") from None
        if not (isinstance(obj, type) and issubclass(obj, Environment)):
            raise EnvironmentPluginError(f"environment plug-in {path!r} is not an Environment subclass")
        _plugins[path] = obj


def get_environment(name: str) -> type[Environment]:
    if name in _plugins:
        return _plugins[name]
    if name in _BUILTINS:
        return _BUILTINS[name]()
    known = ", ".join(sorted({*_BUILTINS, *_plugins}))
    if ":" in name:
        raise EnvironmentUnknownError(
            f"unknown environment {name!r}: a message cannot make the rollout import code; list it in "
            f"[rollout] environments (known: {known})")
    raise EnvironmentUnknownError(f"unknown environment {name!r} (known: {known})")


__all__ = ["EnvironmentPluginError", "EnvironmentUnknownError", "get_environment", "load_environments"]
