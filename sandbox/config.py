"""The sandbox's configuration: its isolation level and the limits of each run.

It is the ``[verify.sandbox]`` section (the code verifier) and the
``[rollout.sandbox]`` section (the Python tool of multi-turn episodes): one
struct, so a tool runs model-written code at the same levels and limits as
the verifier.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct


class SandboxLimitsConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # Wall-clock seconds one program run may take before its process group is killed.
    wall_s: Annotated[float, Meta(gt=0, le=600)] = 10.0
    # CPU seconds per program run (RLIMIT_CPU).
    cpu_s: Annotated[int, Meta(ge=1, le=600)] = 10
    # Address space per program, MiB (RLIMIT_AS; docker: memory limit).
    memory_mb: Annotated[int, Meta(ge=16, le=65536)] = 512
    # Largest file a program may write, MiB (RLIMIT_FSIZE).
    file_size_mb: Annotated[int, Meta(ge=1, le=4096)] = 16
    # Open file descriptors per program (RLIMIT_NOFILE).
    open_files: Annotated[int, Meta(ge=16, le=65536)] = 64
    # Processes / threads the program may create (RLIMIT_NPROC; docker: pids limit).
    processes: Annotated[int, Meta(ge=1, le=4096)] = 32
    # Bytes of stdout and of stderr kept per run; the rest is discarded.
    output_bytes: Annotated[int, Meta(ge=1024, le=1 << 30)] = 65536


class SandboxConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # Isolation of untrusted code: "auto" (bwrap, else docker; never "none"), "bwrap" (namespaces; no root needed), "docker" (a locked-down container), or "none" (no namespaces; needs allow_unsandboxed).
    level: Literal["auto", "bwrap", "docker", "none"] = "auto"
    # Set to true, on purpose, to let level "none" run untrusted code without namespaces.
    allow_unsandboxed: bool = False
    # Docker image for level "docker" (built locally; images are never pulled).
    docker_image: str = "rlvr-sandbox:local"
    # Size cap of the program's work dir, MiB (a tmpfs; not capped at level "none").
    work_mb: Annotated[int, Meta(ge=1, le=65536)] = 64
    # Size cap of /tmp and of /dev/shm, MiB each (tmpfs).
    tmp_mb: Annotated[int, Meta(ge=1, le=65536)] = 64
    # Per-run resource limits.
    limits: SandboxLimitsConfig = SandboxLimitsConfig()

    def __post_init__(self) -> None:
        if self.level == "none" and not self.allow_unsandboxed:
            raise ValueError(
                'verify.sandbox.level = "none" runs untrusted code without namespaces: '
                "set verify.sandbox.allow_unsandboxed = true to allow it on purpose"
            )

    @property
    def backend(self) -> Literal["local", "docker"]:
        """The sandbox class the level needs."""
        return "docker" if self.level == "docker" else "local"


__all__ = ["SandboxConfig", "SandboxLimitsConfig"]
