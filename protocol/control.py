"""Heartbeat, Control and DeadLetter: the messages about the system itself."""

from __future__ import annotations

from typing import Literal

from msgspec import Struct

Role = Literal["rollout", "verify", "learn", "feeder"]


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


class Control(Struct, frozen=True, tag="control", omit_defaults=True):
    run: str
    command: Literal["pause", "resume", "drain", "stop"]
    reason: str = ""
    target: str = "*"  # a replica id, a role name, or "*" for everyone
    v: int = 1


class DeadLetter(Struct, frozen=True, tag="dead", omit_defaults=True):
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


__all__ = ["Control", "DeadLetter", "Heartbeat", "Role"]
