"""The sandbox interface: run untrusted files with argv and stdin under limits.

A sandbox reports what happened as data (``ExecutionResult``), like nanochat:
a crash, a timeout, a memory blow-up or truncated output are results, not
exceptions. ``error`` is set only when the sandbox itself failed (it could not
start the program at all), so the caller can say ``sandbox_error`` rather
than mistake infrastructure for a wrong answer.

Exceptions are for misuse and set-up faults: ``SandboxUnavailableError`` when
a backend cannot be built here (no bwrap, no Docker engine), and
``SandboxUnsandboxedError`` when level ``none`` is asked for without
``allow_unsandboxed``.

``argv[0]`` of ``"python"`` or ``"python3"`` means the sandbox's own Python
interpreter (configured per backend); any other argv runs as given.

Not covered here: what the program is, how tests are run or judged
(``rlvr.verify.code``), and pooling/timeouts of the verifier worker itself.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Protocol

import msgspec
from msgspec import Meta


class ExecutionResult(msgspec.Struct, frozen=True):
    exit_code: int | None  # None: no exit status (never started / killed by us)
    stdout: str
    stderr: str
    timed_out: bool  # wall clock (or the CPU-time rlimit) ran out
    memory_exceeded: bool
    output_truncated: bool  # stdout or stderr hit ``output_bytes``
    wall_s: float
    error: str = ""  # sandbox infrastructure problem; empty when the program ran


class SandboxLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    wall_s: Annotated[float, Meta(gt=0)] = 10.0
    cpu_s: Annotated[int, Meta(gt=0)] = 10
    memory_mb: Annotated[int, Meta(gt=0)] = 512  # address space (local), cgroup memory (docker)
    file_size_mb: Annotated[int, Meta(gt=0)] = 16
    open_files: Annotated[int, Meta(gt=0)] = 64
    processes: Annotated[int, Meta(gt=0)] = 32
    output_bytes: Annotated[int, Meta(gt=0)] = 65536  # per stream


class Sandbox(Protocol):
    def run(
        self, files: dict[str, str], argv: list[str], stdin: str, limits: SandboxLimits
    ) -> ExecutionResult: ...

    def close(self) -> None: ...


class SandboxUnavailableError(RuntimeError):
    """The requested backend (or isolation level) cannot run on this host."""


class SandboxUnsandboxedError(ValueError):
    """Level ``none`` was requested without ``allow_unsandboxed=True``."""


class SandboxFilesInvalidError(ValueError):
    """A file name would land outside the work dir (absolute, ``..``, empty)."""


def check_file_names(files: dict[str, str]) -> None:
    for name in files:
        parts = name.split("/")
        if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise SandboxFilesInvalidError(f"bad sandbox file name {name!r}")


def make_sandbox(backend: Literal["local", "docker"], **opts: Any) -> Sandbox:
    """Build a sandbox. ``opts`` go to the backend's constructor:
    ``LocalSandbox(isolation="bwrap"|"none", python=..., tmp_mb=..., work_mb=...,
    allow_unsandboxed=...)``, ``DockerSandbox(image=..., python=..., client=...)``.
    From a ``[verify.sandbox]`` config use ``levels.sandbox_from_config``."""
    if backend == "local":
        from rlvr.sandbox.local import LocalSandbox

        return LocalSandbox(**opts)
    if backend == "docker":
        from rlvr.sandbox.docker import DockerSandbox

        return DockerSandbox(**opts)
    raise ValueError(f"unknown sandbox backend {backend!r} (expected 'local' or 'docker')")


__all__ = [
    "ExecutionResult",
    "Sandbox",
    "SandboxFilesInvalidError",
    "SandboxLimits",
    "SandboxUnavailableError",
    "SandboxUnsandboxedError",
    "check_file_names",
    "make_sandbox",
]
