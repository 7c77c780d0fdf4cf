"""Heartbeat, Control and DeadLetter: the messages about the system itself."""

from __future__ import annotations

from typing import Literal

from msgspec import Struct

Role = Literal["rollout", "verify", "learn", "feeder", "autoscale"]


class Heartbeat(Struct, frozen=True, tag="heartbeat", omit_defaults=True):
    run: str
    role: Role
    replica: str
    host: str
    pid: int
    sent_at: float
    started_at: float
    state: Literal["starting", "running", "draining"] = "running"
    policy_version: int = 0
    in_flight: int = 0
    # Monotonic counters (messages acked, dead-lettered, per-outcome counts...).
    counters: dict[str, float] = {}
    # Point-in-time gauges (tokens/s, latency p50/p99, queue depths...).
    gauges: dict[str, float] = {}
    v: int = 1
    # What this replica is warning about now, one line each (the learner's
    # reward-signal alarms: flat rewards, a verifier that never parses); `status` prints them.
    alerts: list[str] = []
    # What the sender last did, in words: the autoscaler's last scaling decision and its reason.
    detail: str = ""


class Control(Struct, frozen=True, tag="control", omit_defaults=True):
    run: str
    command: Literal["pause", "resume", "drain", "stop"]
    reason: str = ""
    target: str = "*"  # a replica id, a role name, or "*" for everyone
    v: int = 1


class DeadLetter(Struct, frozen=True, tag="dead", omit_defaults=True):
    """A message a consumer gave up on, with why.

    Normally a copy (``data`` holds the raw bytes). A message too large to
    copy into DEAD under the server's ``max_payload`` is sent as a
    *reference*: ``reference`` is true, ``data`` holds only its first bytes,
    and ``stream``/``stream_seq``/``size`` say where it was and how big.
    """

    run: str
    stage: str  # the consumer that gave up: "rollout", "verify", "learn"
    reason: str
    error_type: str
    delivery_count: int
    subject: str
    headers: dict[str, str]
    data: bytes
    replica: str
    created_at: float
    v: int = 1
    # Why, as a counter key: malformed, schema, version, invalid, conflict, poison, term.
    kind: str = ""
    stream: str = ""
    stream_seq: int = 0
    size: int = 0  # bytes of the original payload
    reference: bool = False


__all__ = ["Control", "DeadLetter", "Heartbeat", "Role"]
