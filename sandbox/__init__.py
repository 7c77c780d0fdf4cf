"""Sandboxes for untrusted programs: ``local`` (bubblewrap, or ``none``) and
``docker``, behind one interface (see ``base``); ``levels`` builds one from
``[verify.sandbox]`` and says which level is in use and why."""

from rlvr.sandbox.base import (
    ExecutionResult,
    Sandbox,
    SandboxFilesInvalidError,
    SandboxLimits,
    SandboxUnavailableError,
    SandboxUnsandboxedError,
    make_sandbox,
)

__all__ = [
    "ExecutionResult",
    "Sandbox",
    "SandboxFilesInvalidError",
    "SandboxLimits",
    "SandboxUnavailableError",
    "SandboxUnsandboxedError",
    "make_sandbox",
]
