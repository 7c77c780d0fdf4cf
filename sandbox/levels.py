"""Which sandbox level runs untrusted code, and why: from ``[verify.sandbox]``
to a built ``Sandbox``.

- ``choose_level(cfg)`` resolves ``auto`` (bwrap, else docker) by building and
  probing each in turn, and checks that an explicit level works here. It
  returns the config with a concrete level and a sentence saying why, for the
  verify role to log at start and show in its heartbeat. ``auto`` never
  lands on ``none``: when nothing works it raises ``SandboxUnavailableError``
  with every reason. ``none`` is only ever the user's explicit choice, and the
  config refuses it without ``allow_unsandboxed = true``.
- ``sandbox_from_config(cfg)`` builds the sandbox a worker process uses.

Not covered: the sandboxes themselves (``local``, ``docker``).
"""

from __future__ import annotations

import os

import msgspec

from rlvr.sandbox.config import SandboxConfig
from rlvr.sandbox.base import Sandbox, SandboxUnavailableError

# Heartbeat gauge per level (gauges are numbers): exactly one is 1.0.
GAUGE_LEVELS = ("bwrap", "docker", "none", "unavailable")


def sandbox_from_config(cfg: SandboxConfig) -> Sandbox:
    """Build the sandbox ``cfg`` names (``auto`` resolved as in ``choose_level``)."""
    if cfg.level == "auto":
        return _auto(cfg)[0]
    if cfg.level == "docker":
        from rlvr.sandbox.docker import DockerSandbox

        return DockerSandbox(image=cfg.docker_image, work_mb=cfg.work_mb, tmp_mb=cfg.tmp_mb)
    from rlvr.sandbox.local import LocalSandbox

    return LocalSandbox(cfg.level, tmp_mb=cfg.tmp_mb, work_mb=cfg.work_mb, allow_unsandboxed=cfg.allow_unsandboxed)


def choose_level(cfg: SandboxConfig) -> tuple[SandboxConfig, str]:
    """The config with a concrete level that works here, and why that level.
    Raises ``SandboxUnavailableError`` (with the reasons) when it does not."""
    if cfg.level == "none":
        from rlvr.sandbox.local import describe_none

        # Not probed in this process: level none makes its process a child
        # subreaper, which the role's main process must not become.
        return cfg, describe_none(os.geteuid() == 0)
    if cfg.level == "auto":
        box, chosen, why = _auto(cfg)
        box.close()
        return chosen, why
    box = sandbox_from_config(cfg)
    try:
        return cfg, f"configured: {_why(box)}"
    finally:
        box.close()


def _auto(cfg: SandboxConfig) -> tuple[Sandbox, SandboxConfig, str]:
    reasons = []
    for level in ("bwrap", "docker"):
        concrete = msgspec.structs.replace(cfg, level=level)
        try:
            box = sandbox_from_config(concrete)
        except SandboxUnavailableError as e:
            reasons.append(f"{level}: {e}")
            continue
        skipped = f" (not {'; '.join(reasons)})" if reasons else ""
        return box, concrete, f"auto chose {_why(box)}{skipped}"
    raise SandboxUnavailableError(
        "no sandbox works here (" + "; ".join(reasons) + '); auto never falls back to level "none": '
        'install bubblewrap, start a Docker engine, or set level = "none" with allow_unsandboxed = true'
    )


def _why(box: Sandbox) -> str:
    return str(getattr(box, "why", type(box).__name__))


def gauges(level: str) -> dict[str, float]:
    """Heartbeat gauges naming the level in use (numbers only on the wire)."""
    out = {f"sandbox_level_{name}": float(name == level) for name in GAUGE_LEVELS}
    out["sandbox_verifier_root"] = float(os.geteuid() == 0)
    return out


__all__ = ["GAUGE_LEVELS", "choose_level", "gauges", "sandbox_from_config"]
