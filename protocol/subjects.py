"""Subject, stream, consumer and bucket names of one run, and their definitions.

Every name is derived from the run id, so many runs share one NATS cluster
without seeing each other. The definitions here are plain data (msgspec
Structs); ``rlvr.actors.bus`` creates them idempotently.
"""

from __future__ import annotations

import re
from typing import Literal

from msgspec import Struct

_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class InvalidRunIdError(ValueError):
    pass


def validate_run_id(run: str) -> str:
    # Stream names may not contain '.', '*', '>' or spaces; subjects use '.' as separator.
    if not _RUN_ID.match(run):
        raise InvalidRunIdError(
            f"run id {run!r} must be 1-64 characters of letters, digits, '_' or '-'"
        )
    return run


class StreamDef(Struct, frozen=True):
    name: str
    subjects: list[str]
    retention: Literal["workqueue", "limits"]
    max_age_s: float = 0.0  # 0 = unlimited
    max_msgs_per_subject: int = -1  # -1 = unlimited
    duplicate_window_s: float = 120.0


class ConsumerDef(Struct, frozen=True):
    stream: str
    durable: str
    filter_subject: str
    ack_wait_s: float
    max_deliver: int
    max_ack_pending: int


class RunNames(Struct, frozen=True):
    """All names of one run. ``RunNames("demo").tasks == "rlvr.demo.tasks"``."""

    run: str

    def __post_init__(self) -> None:
        validate_run_id(self.run)

    # --- subjects ---------------------------------------------------------
    @property
    def prefix(self) -> str:
        return f"rlvr.{self.run}"

    @property
    def tasks(self) -> str:
        return f"{self.prefix}.tasks"

    @property
    def rollouts(self) -> str:
        return f"{self.prefix}.rollouts"

    @property
    def scored(self) -> str:
        return f"{self.prefix}.scored"

    @property
    def weights(self) -> str:
        return f"{self.prefix}.weights"

    @property
    def control(self) -> str:
        return f"{self.prefix}.control"

    def status(self, role: str = "*", replica: str = "*") -> str:
        return f"{self.prefix}.status.{role}.{replica}"

    def dead(self, stage: str = "*") -> str:
        return f"{self.prefix}.dead.{stage}"

    # --- streams ----------------------------------------------------------
    def stream(self, kind: Literal["TASKS", "ROLLOUTS", "SCORED", "WEIGHTS", "DEAD"]) -> str:
        return f"RLVR_{self.run}_{kind}"

    @property
    def kv_bucket(self) -> str:
        return f"rlvr-{self.run}-state"

    @property
    def weights_bucket(self) -> str:
        return f"rlvr-{self.run}-weights"

    @property
    def bodies_bucket(self) -> str:
        """Object store of the samples of groups too large for one message (actors/bodies.py)."""
        return f"rlvr-{self.run}-bodies"

    def streams(self, scored_max_age_s: float, duplicate_window_s: float) -> list[StreamDef]:
        dw = duplicate_window_s
        return [
            StreamDef(self.stream("TASKS"), [self.tasks], "workqueue", duplicate_window_s=dw),
            StreamDef(self.stream("ROLLOUTS"), [self.rollouts], "workqueue", duplicate_window_s=dw),
            # SCORED is kept (limits) so the learner can replay from its
            # checkpointed position after a crash.
            StreamDef(
                self.stream("SCORED"),
                [self.scored],
                "limits",
                max_age_s=scored_max_age_s,
                duplicate_window_s=dw,
            ),
            StreamDef(
                self.stream("WEIGHTS"),
                [self.weights],
                "limits",
                max_msgs_per_subject=1,
                duplicate_window_s=dw,
            ),
            StreamDef(self.stream("DEAD"), [self.dead(">")], "limits"),
        ]


# Keys of the run's KV bucket (``RunNames.kv_bucket``), all written by the learner.
KV_CONFIG = "config"  # the resolved run config, secrets redacted
KV_POLICY_VERSION = "policy_version"  # the last weights version announced
KV_LEARNER = "learner"  # progress at the last checkpoint: step, version, ledger floor (JSON)
KV_LEARNER_LEASE = "learner-lease"  # the learner holding the run (rlvr.learner.custody.lease)

__all__ = [
    "KV_CONFIG", "KV_LEARNER", "KV_LEARNER_LEASE", "KV_POLICY_VERSION", "ConsumerDef", "InvalidRunIdError",
    "RunNames", "StreamDef", "validate_run_id",
]
