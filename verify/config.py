"""Configuration of the verifier role (the ``[verify]`` section).

It covers the worker pool (size, hard timeout, the reward a timeout gets),
how many messages one replica holds at once, and the sandbox that code
verifiers use. Which verifier scores a task and with which parameters is not
config: it travels in each task's ``VerifierSpec``, and names a built-in or
one of the ``plugins`` listed here (never an arbitrary import path).

The comment above each field is its documentation (docs/config.md, the option
table is generated from these comments).
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct

from rlvr.sandbox.config import SandboxConfig, SandboxLimitsConfig  # noqa: F401 (re-exported)

Seconds = Annotated[float, Meta(gt=0)]


class VerifyConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # Worker processes per replica; each runs one verification at a time.
    pool_size: Annotated[int, Meta(ge=1, le=256)] = 2
    # Hard wall-clock limit per verification; the worker is killed and replaced past it.
    timeout_s: Annotated[float, Meta(gt=0, le=3600)] = 30.0
    # Reward of a verification that timed out (its outcome is always "timeout").
    timeout_reward: Annotated[float, Meta(ge=-10, le=10)] = 0.0
    # Reward of a verification whose worker crashed (outcome "sandbox_error").
    error_reward: Annotated[float, Meta(ge=-10, le=10)] = 0.0
    # Seconds a new worker may take to start and warm up (import sympy) before it counts as failed.
    worker_start_timeout_s: Annotated[float, Meta(gt=0, le=600)] = 120.0
    # Replace a worker after this many verifications (0: never), to bound slow leaks.
    max_tasks_per_worker: Annotated[int, Meta(ge=0)] = 0
    # Verifiers warmed up in every worker at start, so the first real call pays no import.
    warm_verifiers: tuple[str, ...] = ("math",)
    # Plug-in verifiers, "package.module:ATTR" each naming a module-level Verifier,
    # imported once at start (a bad one stops the replica). Tasks may then name them;
    # a message never makes the verifier import anything it names.
    plugins: tuple[str, ...] = ()
    # Messages one replica holds at once (pulled, not yet acked); at least pool_size keeps workers busy.
    concurrency: Annotated[int, Meta(ge=1, le=4096)] = 8
    # Seconds between in_progress signals for a message still being verified
    # (at most a third of bus.ack_wait_s: a longer interval is tightened to that, with a warning).
    in_progress_every_s: Seconds = 5.0
    # The sandbox code verifiers run untrusted programs in.
    sandbox: SandboxConfig = SandboxConfig()

    def __post_init__(self) -> None:
        for i, path in enumerate(self.plugins):
            module, _, attr = path.partition(":")
            if not (module and attr.isidentifier() and all(p.isidentifier() for p in module.split("."))):
                raise ValueError(f"plugins[{i}] = {path!r} is not 'package.module:ATTR'")
        # A sandbox run longer than the pool timeout would always end as a
        # pool timeout (the worker killed) instead of a clean sandbox verdict.
        if self.sandbox.limits.wall_s >= self.timeout_s:
            raise ValueError(
                f"sandbox.limits.wall_s ({self.sandbox.limits.wall_s}) must be below "
                f"timeout_s ({self.timeout_s})"
            )


__all__ = ["SandboxConfig", "SandboxLimitsConfig", "VerifyConfig"]
