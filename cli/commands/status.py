"""``rlvr-actor status``: replicas, stream depths, consumer lag, pending acks.

Replicas come from heartbeats heard during ``--wait`` seconds; streams and
consumers from JetStream's own info calls, so the numbers are the server's,
not an actor's opinion. ``collect_status`` returns a typed ``StatusSnapshot``,
which the live panel (``rlvr.cli.ui.live``) draws too; ``--json`` prints it.
"""

from __future__ import annotations

import argparse
import json
import time

import anyio
import msgspec

from rlvr.actors.config import NatsConfig
from rlvr.cli.args import RunArgs, add_run_arguments, load_run_config
from rlvr.protocol import Heartbeat, MessageDecodeError, RunNames, decode
from rlvr.protocol.subjects import KV_LEARNER, KV_LEARNER_LEASE, KV_POLICY_VERSION

DESCRIPTION = ("Print replicas (from heartbeats, with dead letters and sandbox level), stream depths, "
               "consumer lag, and the learner's lease, last checkpoint and any retention gap.")
STREAMS = ("TASKS", "ROLLOUTS", "SCORED", "WEIGHTS", "DEAD")
DURABLES = (("TASKS", "rollout"), ("ROLLOUTS", "verify"), ("SCORED", "learn"))


class Args(RunArgs, frozen=True, kw_only=True):
    wait: float = 3.0
    json: bool = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_arguments(p)
    p.add_argument("--wait", type=float, default=3.0, help="seconds to listen for heartbeats")
    p.add_argument("--json", action="store_true", help="machine-readable output")


# --- the snapshot ------------------------------------------------------------------


class ReplicaStatus(msgspec.Struct, frozen=True):
    role: str
    replica: str
    state: str
    age_s: float  # since its last heartbeat
    policy_version: int
    in_flight: int
    gauges: dict[str, float]
    counters: dict[str, float]
    alerts: list[str] = []  # what the replica warns about now (the learner's reward-signal alarms)
    detail: str = ""  # what it last did (the autoscaler's last decision and its reason)


class StreamStatus(msgspec.Struct, frozen=True, omit_defaults=True):
    messages: int | None = None
    bytes: int | None = None
    first_seq: int | None = None
    error: str = ""  # the stream does not exist (yet), or cannot be read


class ConsumerStatus(msgspec.Struct, frozen=True, omit_defaults=True):
    lag: int | None = None  # not yet delivered
    ack_pending: int | None = None  # delivered, not yet acked
    redelivered: int | None = None
    waiting: int | None = None  # pull requests waiting
    error: str = ""


class LeaseView(msgspec.Struct, frozen=True):
    """The learner's lease as it stands in the run's KV (``rlvr.learner.custody.lease``)."""

    replica: str
    host: str
    pid: int
    expires_at: float


class ProgressView(msgspec.Struct, frozen=True):
    """The learner's last committed checkpoint as it stands in the run's KV."""

    step: int
    version: int
    floor: int = 1


class LearnerStatus(msgspec.Struct, frozen=True):
    lease: LeaseView | None = None
    progress: ProgressView | None = None
    retention_gap: int = 0  # scored samples expired from SCORED before a checkpoint settled them


class StatusSnapshot(msgspec.Struct, frozen=True):
    run: str
    policy_version: int | None
    replicas: list[ReplicaStatus]
    streams: dict[str, StreamStatus]
    consumers: dict[str, ConsumerStatus]
    learner: LearnerStatus

    def replica(self, name: str) -> ReplicaStatus | None:
        return next((r for r in self.replicas if r.replica == name), None)


async def collect_status(run: str, nats_cfg: NatsConfig, wait_s: float) -> StatusSnapshot:
    import nats

    from rlvr.actors.secrets import connect_options

    names = RunNames(run)
    # The same credentials and TLS as the roles, as the read-only `ops` user.
    nats_cfg = nats_cfg.for_role("ops")
    nc = await nats.connect(
        [u.strip() for u in nats_cfg.url.split(",")],
        connect_timeout=max(1, int(nats_cfg.connect_timeout_s)),
        max_reconnect_attempts=1,
        **connect_options(nats_cfg),
    )
    try:
        js = nc.jetstream(timeout=nats_cfg.request_timeout_s)
        beats: dict[str, Heartbeat] = {}

        async def on_hb(msg) -> None:
            try:
                hb = decode(msg.data, Heartbeat)
            except MessageDecodeError:
                return
            beats[hb.replica] = hb

        sub = await nc.subscribe(f"{names.prefix}.status.>", cb=on_hb)
        await anyio.sleep(wait_s)  # listening for heartbeats is the point: this is the window
        await sub.unsubscribe()
        streams = {}
        for kind in STREAMS:
            try:
                info = await js.stream_info(names.stream(kind))
                streams[kind] = StreamStatus(info.state.messages, info.state.bytes, info.state.first_seq)
            except Exception as e:  # stream not created yet
                streams[kind] = StreamStatus(error=type(e).__name__)
        consumers = {}
        for stream, durable in DURABLES:
            try:
                ci = await js.consumer_info(names.stream(stream), durable)
                consumers[durable] = ConsumerStatus(ci.num_pending, ci.num_ack_pending, ci.num_redelivered,
                                                    ci.num_waiting)
            except Exception as e:
                consumers[durable] = ConsumerStatus(error=type(e).__name__)
        version, lease, progress = None, None, None
        try:
            kv = await js.key_value(names.kv_bucket)
        except Exception:  # the learner has not created the run's bucket yet
            kv = None
        if kv is not None:
            version = await _kv_get(kv, KV_POLICY_VERSION, int)
            lease = await _kv_get(kv, KV_LEARNER_LEASE, LeaseView)
            progress = await _kv_get(kv, KV_LEARNER, ProgressView)
        now = time.time()
        return StatusSnapshot(
            run=run,
            policy_version=version,
            replicas=[
                ReplicaStatus(hb.role, hb.replica, hb.state, round(now - hb.sent_at, 1), hb.policy_version,
                              hb.in_flight, dict(hb.gauges), dict(hb.counters), list(hb.alerts), hb.detail)
                for hb in sorted(beats.values(), key=lambda h: (h.role, h.replica))
            ],
            streams=streams,
            consumers=consumers,
            learner=LearnerStatus(lease, progress, retention_gap(progress, streams.get("SCORED"))),
        )
    finally:
        await nc.close()


async def _kv_get(kv, key: str, typ: type):
    try:
        return msgspec.json.decode((await kv.get(key)).value, type=typ)
    except Exception:  # absent (not written yet), or not what we expect
        return None


def retention_gap(progress: ProgressView | None, scored: StreamStatus | None) -> int:
    """Scored samples removed by retention before the learner's last checkpoint
    settled them: SCORED's first sequence past the checkpointed floor (an upper
    bound: samples settled above the floor are counted too)."""
    if progress is None or scored is None or scored.first_seq is None:
        return 0
    return max(0, scored.first_seq - progress.floor)


# --- the text ----------------------------------------------------------------------


def dead_letter_summary(counters: dict[str, float]) -> str:
    """One line of a replica's dead letters by kind, poison pills and failed
    dead letters (``rlvr.actors.consume`` counters); empty when all are zero."""
    kinds = {k.removeprefix("dead_letter."): int(v) for k, v in sorted(counters.items())
             if k.startswith("dead_letter.") and v}
    parts = []
    if kinds:
        parts.append("dead letters: " + " ".join(f"{k}={v}" for k, v in kinds.items()))
    for key, label in (("poison_pills", "poison pills"), ("dead_letter_references", "sent as reference"),
                       ("dead_letter_bare", "sent bare"), ("dead_letter_failures", "dead-letter failures"),
                       ("dead_letter_retrying", "retrying now"),
                       ("settle_failures", "ack failures")):
        if counters.get(key):
            parts.append(f"{label}={int(counters[key])}")
    return "  ".join(parts)


def sandbox_summary(gauges: dict[str, float]) -> str:
    """A verifier's code sandbox level (its ``sandbox_level_<name>`` gauge set to 1)."""
    levels = [k.removeprefix("sandbox_level_") for k, v in gauges.items() if k.startswith("sandbox_level_") and v]
    if not levels:
        return ""
    who = "as root" if gauges.get("sandbox_verifier_root") else "as non-root"
    return f"sandbox level {levels[0]} ({who})"


def autoscale_summary(r: ReplicaStatus) -> str:
    """The autoscaler's line: replicas now and targeted, the backlog, its bounds."""
    g = r.gauges
    backlog = f"backlog {g['backlog']:.0f}" if "backlog" in g else "backlog unknown"
    draining = f", {g['draining']:.0f} draining" if g.get("draining") else ""
    return (f"{r.replica.removeprefix('autoscale-')} replicas {g.get('replicas', 0):.0f} "
            f"(target {g.get('target', 0):.0f}, bounds {g.get('min_replicas', 0):.0f}-{g.get('max_replicas', 0):.0f}"
            f"{draining}), {backlog}")


def format_learner(learner: LearnerStatus) -> str:
    lease, progress = learner.lease, learner.progress
    held = (f"lease held by {lease.replica} (pid {lease.pid} on {lease.host}), "
            f"expires in {lease.expires_at - time.time():.0f}s" if lease else "no lease (no learner has started)")
    done = (f"checkpointed step {progress.step}, version {progress.version}, floor {progress.floor}"
            if progress else "no checkpoint yet")
    gap = learner.retention_gap
    return f"{held}; {done}" + (f"; RETENTION GAP: up to {gap} scored samples expired unsettled" if gap else "")


def _fields(s: msgspec.Struct) -> str:
    return "  ".join(f"{k}={v}" for k, v in msgspec.structs.asdict(s).items() if v not in (None, ""))


def format_status(st: StatusSnapshot) -> str:
    lines = [f"run {st.run}  policy version {st.policy_version}", "", "replicas:"]
    if not st.replicas:
        lines.append("  (no heartbeats heard)")
    for r in st.replicas:
        rate = r.gauges.get("tokens_per_s") or r.gauges.get("samples_per_s") or 0.0
        lines.append(
            f"  {r.role:<8} {r.replica:<32} {r.state:<9} v{r.policy_version:<4} "
            f"in_flight={r.in_flight:<4} rate={rate:.1f}/s  last seen {r.age_s}s ago"
        )
        if faults := dead_letter_summary(r.counters):
            lines.append(f"    {faults}")
        if sandbox := sandbox_summary(r.gauges):
            lines.append(f"    {sandbox}")
        if r.role == "autoscale":
            lines.append(f"    {autoscale_summary(r)}")
        if r.detail:
            lines.append(f"    {r.detail}")
        lines += [f"    ALARM: {alert}" for alert in r.alerts]
    lines += ["", "streams:"]
    lines += [f"  {k:<9} {_fields(v)}" for k, v in st.streams.items()]
    lines += ["", "consumers:"]
    lines += [f"  {k:<8} {_fields(v)}" for k, v in st.consumers.items()]
    lines += ["", "learner:", "  " + format_learner(st.learner)]
    return "\n".join(lines)


def run(args: Args) -> int:
    cfg = load_run_config(args, "rlvr-actor status")
    try:
        st = anyio.run(collect_status, cfg.run, cfg.nats, args.wait)
    except Exception as e:
        from rlvr.actors.secrets import redact

        print(redact(f"rlvr-actor status: cannot reach NATS at {cfg.nats.url}: {e!r}"))
        return 3
    print(json.dumps(msgspec.to_builtins(st), indent=2) if args.json else format_status(st))
    return 0
