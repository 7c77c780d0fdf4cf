"""Importing a plug-in named "package.module:ATTR" from a role's own config: the one way to do it.

Every role that takes plug-ins (the verifier's reward functions, the rollout's
environments) imports them at start-up from its config, never from a message,
through ``import_attr``; each registry checks what it got and wraps the error
in its own type, so the message names the plug-in and why it failed.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import threading
from collections.abc import Iterator


class PluginImportError(ValueError):
    """A "package.module:ATTR" that is malformed, does not import, or lacks the attribute."""


def import_attr(path: str) -> object:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise PluginImportError(f"{path!r} is not 'package.module:ATTR'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise PluginImportError(f"{path!r}: cannot import {module_name!r}: {e}") from None
    if not hasattr(module, attr):
        raise PluginImportError(f"{path!r}: module {module_name!r} has no attribute {attr!r}")
    return getattr(module, attr)


@contextlib.contextmanager
def keep_signal_handlers(*signums: int) -> Iterator[None]:
    """Run user code that may replace this process's signal handlers, and put ours back after it.

    ``verifiers`` does: each ``vf.Environment`` it makes installs a SIGTERM handler that calls
    ``exit(143)`` and a SIGINT one, over the role's own (the graceful stop: a rollout finishes or
    naks what it holds, a learner checkpoints). On the main thread only (no other may set them)."""
    signums = signums or (signal.SIGTERM, signal.SIGINT)
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in signums}
    try:
        yield
    finally:
        for s, handler in saved.items():
            if handler is not None and signal.getsignal(s) is not handler:
                signal.signal(s, handler)
