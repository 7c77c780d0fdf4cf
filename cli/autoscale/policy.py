"""How many verifier replicas to run: a pure function of what the bus says.

Inputs (an ``Observation``, made by ``rlvr.cli.autoscale.observe``):

- the backlog of the ``verify`` durable on ROLLOUTS: ``num_pending +
  num_ack_pending``, the groups (one message each, protocol/groups.py) not yet
  delivered plus those delivered and not yet acked (held by a replica);
- each replica's heartbeat: its age, its state (``draining``), its pool's busy
  share (``workers_busy / pool_size``), its throughput and latency p99.

Output: a ``Decision`` with the target count, between ``min_replicas`` and
``max_replicas``, the replicas to drain, the dead ones to replace, and the
reason in words. ``decide`` has no clock, no I/O and no randomness: the
caller passes the time and the previous ``PolicyState``.

The rules, in order:

1. **Dead replicas are replaced, not counted.** A replica with no heartbeat
   for ``dead_after_s`` (or none at all ``startup_grace_s`` after its start)
   serves nothing; it is listed in ``replace`` and the count keeps its slot.
2. **The bounds.** Fewer than ``min_replicas`` serving: up to the minimum
   now; more than ``max_replicas``: down to it now.
3. **Up, fast.** When the backlog exceeds ``target_backlog_per_replica`` per
   serving replica by more than ``tolerance``, the target becomes
   ``ceil(backlog / target_backlog_per_replica)``, at most double the
   current count (one more at least), at most ``max_replicas``; then no
   other step up for ``scale_up_cooldown_s``, so that the new replicas can
   start and pull before the backlog is read again.
4. **Down, slowly, one at a time.** Only when the backlog would fit the
   remaining replicas at half the target (``backlog <= 0.5 x target x (n-1)``),
   the live replicas' mean busy share is under ``scale_down_busy_below``
   (busy workers with a small backlog are keeping up, not idle), and both
   have held for ``scale_down_stabilization_s`` without a step up in
   between. One replica is drained (the one holding the fewest messages; the
   newest on a tie), and the next step down waits as long again.
5. **Unknown backlog holds.** When the consumer's info cannot be read, the
   count holds (dead replicas are still replaced).

Rules 3 and 4 are the hysteresis: a backlog between the two thresholds moves
nothing, and a backlog that flips between high and low every reading goes
up once and never down until it has been low for the whole window.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

Seconds = Annotated[float, Meta(gt=0)]
Fraction = Annotated[float, Meta(ge=0, le=1)]


class AutoscaleConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # `rlvr-actor up` scales its verifier replicas on the backlog (up.verify_replicas is
    # then the starting count). `rlvr-actor autoscale --role verify` runs regardless.
    enabled: bool = False
    # Fewest verifier replicas: never drained below, started again when fewer run.
    min_replicas: Annotated[int, Meta(ge=1)] = 1
    # Most verifier replicas, whatever the backlog (each runs verify.pool_size workers).
    max_replicas: Annotated[int, Meta(ge=1)] = 4
    # Groups (one message each) waiting or held (the verify consumer's pending + ack pending)
    # one replica should carry. Above it (by `tolerance`) replicas are added; a replica is
    # drained only when the rest would carry half of it. 4 groups of 8 are 32 samples; KEDA's
    # lagThreshold counts the same messages.
    target_backlog_per_replica: Annotated[int, Meta(ge=1)] = 4
    # Relative slack above the target before scaling up.
    tolerance: Annotated[float, Meta(ge=0)] = 0.1
    # Seconds after a step up before another: new replicas start and pull meanwhile.
    scale_up_cooldown_s: Seconds = 10.0
    # Seconds the backlog and the busy share must stay low before a replica is drained
    # (and between two drains, and after a step up).
    scale_down_stabilization_s: Seconds = 30.0
    # A replica is drained only while the live replicas' mean pool busy share is below this.
    scale_down_busy_below: Fraction = 0.5
    # Seconds a new replica has to send its first heartbeat before it counts as dead.
    startup_grace_s: Seconds = 120.0
    # Seconds without a heartbeat after which a running replica counts as dead and is replaced.
    dead_after_s: Seconds = 15.0
    # Seconds between two readings of the backlog and two decisions.
    interval_s: Seconds = 2.0

    def __post_init__(self) -> None:
        if self.max_replicas < self.min_replicas:
            raise msgspec.ValidationError(
                f"max_replicas ({self.max_replicas}) is below min_replicas ({self.min_replicas}) - at `$.max_replicas`"
            )


class ReplicaView(Struct, frozen=True):
    """One replica the scaler runs, as last heard."""

    name: str
    started_s_ago: float
    heartbeat_age_s: float | None = None  # None: no heartbeat heard yet
    draining: bool = False  # asked to stop (or says so): finishing what it holds
    busy: float | None = None  # pool workers busy / pool size, from its last heartbeat
    in_flight: int = 0
    samples_per_s: float = 0.0
    latency_p99_s: float = 0.0


class Observation(Struct, frozen=True):
    at: float  # seconds, any monotonic clock
    backlog: int | None  # None: the consumer's info could not be read
    replicas: tuple[ReplicaView, ...] = ()


class PolicyState(Struct, frozen=True):
    last_up_at: float | None = None
    last_down_at: float | None = None
    low_since: float | None = None  # since when the scale-down conditions have held


class Decision(Struct, frozen=True):
    action: Literal["up", "down", "hold"]
    current: int  # replicas serving or starting (dead ones included: they are replaced in place)
    target: int
    reason: str
    drain: tuple[str, ...] = ()  # replicas to stop gracefully
    replace: tuple[str, ...] = ()  # dead replicas to kill and start again


def is_dead(cfg: AutoscaleConfig, r: ReplicaView) -> bool:
    if r.heartbeat_age_s is None:
        return r.started_s_ago > cfg.startup_grace_s
    return r.heartbeat_age_s > cfg.dead_after_s


def decide(cfg: AutoscaleConfig, obs: Observation, state: PolicyState) -> tuple[Decision, PolicyState]:
    serving = [r for r in obs.replicas if not r.draining]
    dead = tuple(r.name for r in serving if is_dead(cfg, r))
    live = [r for r in serving if r.name not in dead]
    n = len(serving)
    replaced = f"; replacing {len(dead)} dead ({', '.join(dead)})" if dead else ""

    def hold(reason: str, st: PolicyState = state) -> tuple[Decision, PolicyState]:
        return Decision("hold", n, n, reason + replaced, replace=dead), st

    if n < cfg.min_replicas:
        return Decision("up", n, cfg.min_replicas, f"{n} serving, below min_replicas {cfg.min_replicas}" + replaced,
                        replace=dead), msgspec.structs.replace(state, last_up_at=obs.at, low_since=None)
    if n > cfg.max_replicas:
        drain = _pick_drain(live or serving, n - cfg.max_replicas)
        return Decision("down", n, cfg.max_replicas, f"{n} serving, above max_replicas {cfg.max_replicas}" + replaced,
                        drain=drain, replace=tuple(d for d in dead if d not in drain)), state
    if obs.backlog is None:
        return hold(f"backlog unknown (the verify consumer's info could not be read): holding at {n}")

    backlog, per = obs.backlog, cfg.target_backlog_per_replica
    load = _load_words(backlog, live)
    if backlog > per * n * (1 + cfg.tolerance) and n < cfg.max_replicas:
        if state.last_up_at is not None and obs.at - state.last_up_at < cfg.scale_up_cooldown_s:
            wait = cfg.scale_up_cooldown_s - (obs.at - state.last_up_at)
            return hold(f"backlog {backlog} > {per} x {n}, but the last step up was "
                        f"{obs.at - state.last_up_at:.0f}s ago (cool-down {wait:.0f}s more){load}",
                        msgspec.structs.replace(state, low_since=None))
        target = min(cfg.max_replicas, max(n + 1, min(2 * n, math.ceil(backlog / per))))
        return (Decision("up", n, target, f"backlog {backlog} > {per} per replica x {n}{load}" + replaced,
                         replace=dead),
                msgspec.structs.replace(state, last_up_at=obs.at, low_since=None))

    busy = _mean_busy(live)
    low = (n > cfg.min_replicas and backlog <= 0.5 * per * (n - 1)
           and (busy is None or busy < cfg.scale_down_busy_below))
    if not low:
        return hold(f"backlog {backlog} for {n} replicas (target {per} each){load}",
                    msgspec.structs.replace(state, low_since=None))
    low_since = state.low_since if state.low_since is not None else obs.at
    quiet_since = max(t for t in (low_since, state.last_up_at, state.last_down_at) if t is not None)
    waited = obs.at - quiet_since
    if waited < cfg.scale_down_stabilization_s:
        return hold(f"backlog {backlog} is low for {n} replicas; draining one after "
                    f"{cfg.scale_down_stabilization_s:.0f}s quiet ({waited:.0f}s so far){load}",
                    msgspec.structs.replace(state, low_since=low_since))
    drain = _pick_drain(live or serving, 1)
    return (Decision("down", n, n - 1, f"backlog {backlog} <= half of {per} x {n - 1} for "
                     f"{waited:.0f}s{load}" + replaced, drain=drain, replace=tuple(d for d in dead if d not in drain)),
            msgspec.structs.replace(state, last_down_at=obs.at, low_since=low_since))


def _pick_drain(replicas: list[ReplicaView], k: int) -> tuple[str, ...]:
    """The replicas holding the fewest messages, the newest first on a tie."""
    ranked = sorted(replicas, key=lambda r: (r.in_flight, r.started_s_ago))
    return tuple(r.name for r in ranked[:k])


def _mean_busy(live: list[ReplicaView]) -> float | None:
    known = [r.busy for r in live if r.busy is not None]
    return sum(known) / len(known) if known else None


def _load_words(backlog: int, live: list[ReplicaView]) -> str:
    """What the heartbeats add to a reason: busy share, throughput, drain time, p99."""
    busy = _mean_busy(live)
    rate = sum(r.samples_per_s for r in live)
    parts = []
    if busy is not None:
        parts.append(f"busy {100 * busy:.0f}%")
    if rate > 0:
        parts.append(f"{rate:.1f} samples/s, drains in ~{backlog / rate:.0f}s")
    p99 = max((r.latency_p99_s for r in live), default=0.0)
    if p99:
        parts.append(f"p99 {p99:.2f}s")
    return f" ({', '.join(parts)})" if parts else ""
