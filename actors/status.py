"""``rlvr-actor status``: replicas, stream depths, consumer lag, pending acks.

Replicas come from heartbeats heard during ``--wait`` seconds; streams and
consumers from JetStream's own info calls, so the numbers are the server's,
not an actor's opinion.
"""

from __future__ import annotations

import argparse
import json
import time

import anyio
import msgspec

from rlvr.actors.config import NatsConfig
from rlvr.protocol import Heartbeat, MessageDecodeError, RunNames, decode
from rlvr.protocol.subjects import KV_LEARNER, KV_LEARNER_LEASE, KV_POLICY_VERSION


async def collect_status(run: str, nats_cfg: NatsConfig, wait_s: float) -> dict:
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
        replicas: dict[str, Heartbeat] = {}

        async def on_hb(msg) -> None:
            try:
                hb = decode(msg.data, Heartbeat)
            except MessageDecodeError:
                return
            replicas[hb.replica] = hb

        sub = await nc.subscribe(f"{names.prefix}.status.>", cb=on_hb)
        await anyio.sleep(wait_s)
        await sub.unsubscribe()
        streams = {}
        for kind in ("TASKS", "ROLLOUTS", "SCORED", "WEIGHTS", "DEAD"):
            try:
                info = await js.stream_info(names.stream(kind))
                streams[kind] = {"messages": info.state.messages, "bytes": info.state.bytes,
                                 "first_seq": info.state.first_seq}
            except Exception as e:  # stream not created yet
                streams[kind] = {"error": type(e).__name__}
        consumers = {}
        for stream, durable in (("TASKS", "rollout"), ("ROLLOUTS", "verify"), ("SCORED", "learn")):
            try:
                ci = await js.consumer_info(names.stream(stream), durable)
                consumers[durable] = {
                    "lag": ci.num_pending,
                    "ack_pending": ci.num_ack_pending,
                    "redelivered": ci.num_redelivered,
                    "waiting": ci.num_waiting,
                }
            except Exception as e:
                consumers[durable] = {"error": type(e).__name__}
        version = None
        learner: dict = {}
        try:
            kv = await js.key_value(names.kv_bucket)
        except Exception:  # the learner has not created the run's bucket yet
            kv = None
        if kv is not None:
            version = await _kv_json(kv, KV_POLICY_VERSION)
            learner["lease"] = await _kv_json(kv, KV_LEARNER_LEASE)
            learner["progress"] = await _kv_json(kv, KV_LEARNER)
        learner["retention_gap"] = _retention_gap(learner.get("progress"), streams.get("SCORED", {}))
        now = time.time()
        return {
            "run": run,
            "policy_version": version,
            "replicas": [
                {
                    "role": hb.role,
                    "replica": hb.replica,
                    "state": hb.state,
                    "age_s": round(now - hb.sent_at, 1),
                    "policy_version": hb.policy_version,
                    "in_flight": hb.in_flight,
                    "gauges": hb.gauges,
                    "counters": hb.counters,
                }
                for hb in sorted(replicas.values(), key=lambda h: (h.role, h.replica))
            ],
            "streams": streams,
            "consumers": consumers,
            "learner": learner,
        }
    finally:
        await nc.close()


async def _kv_json(kv, key: str):
    try:
        return json.loads((await kv.get(key)).value)
    except Exception:  # absent (not written yet) or not JSON
        return None


def _retention_gap(progress: dict | None, scored: dict) -> int:
    """Scored samples removed by retention before the learner's last checkpoint
    settled them: SCORED's first sequence past the checkpointed floor (an upper
    bound: samples settled above the floor are counted too)."""
    if not progress or "first_seq" not in scored:
        return 0
    return max(0, int(scored["first_seq"]) - int(progress.get("floor", 1)))


def dead_letter_summary(counters: dict[str, float]) -> str:
    """One line of a replica's dead letters by kind, poison pills and failed
    dead letters (``rlvr.actors.consume`` counters); empty when all are zero."""
    kinds = {k.removeprefix("dead_letter."): int(v) for k, v in sorted(counters.items())
             if k.startswith("dead_letter.") and v}
    parts = []
    if kinds:
        parts.append("dead letters: " + " ".join(f"{k}={v}" for k, v in kinds.items()))
    for key, label in (("poison_pills", "poison pills"), ("dead_letter_references", "sent as reference"),
                       ("dead_letter_failures", "dead-letter failures"), ("dead_letter_retrying", "retrying now"),
                       ("settle_failures", "ack failures")):
        if counters.get(key):
            parts.append(f"{label}={int(counters[key])}")
    return "  ".join(parts)


def format_status(st: dict) -> str:
    lines = [f"run {st['run']}  policy version {st['policy_version']}", "", "replicas:"]
    if not st["replicas"]:
        lines.append("  (no heartbeats heard)")
    for r in st["replicas"]:
        g = r["gauges"]
        rate = g.get("tokens_per_s") or g.get("samples_per_s") or 0.0
        lines.append(
            f"  {r['role']:<8} {r['replica']:<32} {r['state']:<9} v{r['policy_version']:<4} "
            f"in_flight={r['in_flight']:<4} rate={rate:.1f}/s  last seen {r['age_s']}s ago"
        )
        if faults := dead_letter_summary(r["counters"]):
            lines.append(f"    {faults}")
        if sandbox := sandbox_summary(g):
            lines.append(f"    {sandbox}")
    lines += ["", "streams:"]
    for k, v in st["streams"].items():
        lines.append(f"  {k:<9} " + ("  ".join(f"{a}={b}" for a, b in v.items())))
    lines += ["", "consumers:"]
    for k, v in st["consumers"].items():
        lines.append(f"  {k:<8} " + ("  ".join(f"{a}={b}" for a, b in v.items())))
    lines += ["", "learner:", "  " + format_learner(st.get("learner", {}))]
    return "\n".join(lines)


def sandbox_summary(gauges: dict[str, float]) -> str:
    """A verifier's code sandbox level (its ``sandbox_level_<name>`` gauge set to 1)."""
    levels = [k.removeprefix("sandbox_level_") for k, v in gauges.items() if k.startswith("sandbox_level_") and v]
    if not levels:
        return ""
    who = "as root" if gauges.get("sandbox_verifier_root") else "as non-root"
    return f"sandbox level {levels[0]} ({who})"


def format_learner(learner: dict) -> str:
    lease, progress = learner.get("lease"), learner.get("progress")
    held = (f"lease held by {lease['replica']} (pid {lease['pid']} on {lease['host']}), "
            f"expires in {lease['expires_at'] - time.time():.0f}s" if lease else "no lease (no learner has started)")
    done = (f"checkpointed step {progress['step']}, version {progress['version']}, floor {progress.get('floor', '?')}"
            if progress else "no checkpoint yet")
    gap = learner.get("retention_gap", 0)
    return f"{held}; {done}" + (f"; RETENTION GAP: up to {gap} scored samples expired unsettled" if gap else "")


def status_main(args: argparse.Namespace, run: str, nats_cfg: NatsConfig) -> int:
    try:
        st = anyio.run(collect_status, run, nats_cfg, args.wait)
    except Exception as e:
        from rlvr.actors.secrets import redact

        print(redact(f"rlvr-actor status: cannot reach NATS at {nats_cfg.url}: {e!r}"))
        return 3
    print(json.dumps(st, indent=2, default=msgspec.to_builtins) if args.json else format_status(st))
    return 0
