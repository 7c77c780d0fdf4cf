"""Sandboxes for untrusted programs: ``local`` (bubblewrap / unshare / rlimits)
and ``docker``, behind one interface (see ``base``)."""

from rlvr.verify.sandbox.base import (
    ExecutionResult,
    Sandbox,
    SandboxFilesInvalidError,
    SandboxLimits,
    SandboxUnavailableError,
    make_sandbox,
)

__all__ = [
    "ExecutionResult",
    "Sandbox",
    "SandboxFilesInvalidError",
    "SandboxLimits",
    "SandboxUnavailableError",
    "make_sandbox",
]
