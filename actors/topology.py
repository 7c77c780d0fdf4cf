"""The run's JetStream topology: created by its one owner, checked by everyone else.

Streams, the durable consumers, the KV bucket and the object-store buckets (weights, bodies) are
created and updated only by the learner (at start) or by ``rlvr-actor init``
(``ensure_topology``). A rollout or verifier never creates or rewrites any of
them: ``check_topology`` waits for them, at most ``bus.topology_wait_s``
seconds and logging what it still waits for, then checks that each has the
shape the role relies on (its subject, its retention policy, a durable with
the role's filter). Limits that differ from the role's own config (a verifier
started with another ``scored_max_age_s``) are the learner's to set: they are
logged once and left alone. A missing piece past the deadline is a
``TopologyMissingError``, a wrong shape a ``TopologyMismatchError``; both name
the stream or consumer and say who creates it.

Why wait rather than fail at once: every deployment (``up``, compose, k8s)
starts the roles together, and the learner imports torch and loads a model
before it reaches the bus; a verifier that failed at once would only be
restarted. Why not create: a role that may create may also rewrite, and with
per-role NATS users (``ops/nats/``) it is not allowed to.

Repair without an operator: the owner keeps its topology (``repair``, every
heartbeat from ``Bus.keep_topology``): a stream, bucket or role durable that
was deleted is recreated, and a recreated stream is logged as an error naming
what went with it. A consumer whose own durable vanished under it
(``rlvr.actors.consume``) waits for the owner, or is the owner and recreates
it where it was reading. A consumer asked to resume at a sequence its stream
never reached (``create_consumer`` with ``start_seq``: the learner's floor)
is looking at a stream deleted and recreated since: the messages it held are
gone, and ``TopologyLostError`` says so instead of skipping the new ones.

Not here: connecting and publishing (``rlvr.actors.bus``), the names and
shapes of the streams (``rlvr.protocol.subjects``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import anyio
from nats.js import api as js_api
from nats.js.errors import APIError, BadRequestError, NotFoundError

from rlvr.actors.logs import get_logger
from rlvr.protocol.subjects import ConsumerDef, StreamDef

if TYPE_CHECKING:
    from rlvr.actors.bus import Bus

log = get_logger("rlvr.topology")

# What each non-owner role reads or writes, and the durable it binds.
ROLE_STREAMS: dict[str, tuple[str, ...]] = {
    "rollout": ("TASKS", "ROLLOUTS", "WEIGHTS", "DEAD"),
    "verify": ("ROLLOUTS", "SCORED", "DEAD"),
}
ROLE_DURABLES = ("rollout", "verify")
_OWNER_HINT = "the learner creates it at start (or run `rlvr-actor init`)"


class TopologyMissingError(RuntimeError):
    """A stream, bucket or consumer this role needs did not appear before the deadline."""


class TopologyMismatchError(RuntimeError):
    """A stream or consumer exists with a shape this role cannot work with."""


class BusStorageError(RuntimeError):
    """JetStream could not reserve a stream's ``max_bytes`` in its file store (error 10047,
    "insufficient storage resources available"): the message names the stream, the config key
    that sizes it and what to change."""


class TopologyLostError(RuntimeError):
    """A stream this role reads was deleted under it: the messages it held are gone."""


# What follows when each stream is recreated empty: said in the repair's log line.
_LOST = {
    "TASKS": "the tasks it held: their slots free after the feeder's task timeout (2 x learn.group_timeout_s)",
    "ROLLOUTS": "the samples it held: their groups expire as partial (counted)",
    "SCORED": "the scored samples it held: the learner stops and names them (TopologyLostError)",
    "WEIGHTS": "the last announcement: replicas keep their version until the next one",
    "DEAD": "the dead letters it held",
}


# The streams with a byte bound, and the bus config key that sets it. JetStream reserves a stream's
# ``max_bytes`` of its file store when the stream is created, whatever the stream holds.
RESERVING_KEYS = {"SCORED": "scored_max_bytes", "DEAD": "dead_max_bytes"}
_INSUFFICIENT_STORAGE = 10047  # JetStream's error code for a reservation its store cannot grant


def reserved_bytes(cfg) -> int:
    """What one run's streams reserve of the server's file store (``cfg``: the bus config)."""
    return sum(getattr(cfg, key) for key in RESERVING_KEYS.values())


def stream_config(bus: Bus, sd: StreamDef, kind: str) -> js_api.StreamConfig:
    """The JetStream config of one run stream, with the bus config's retention bounds."""
    cfg = bus.cfg
    max_age = sd.max_age_s or None
    if kind == "DEAD":
        max_age = cfg.dead_max_age_s
    max_bytes = getattr(cfg, RESERVING_KEYS[kind]) if kind in RESERVING_KEYS else None
    return js_api.StreamConfig(
        name=sd.name,
        subjects=sd.subjects,
        retention=js_api.RetentionPolicy.WORK_QUEUE if sd.retention == "workqueue" else js_api.RetentionPolicy.LIMITS,
        max_age=max_age,
        max_bytes=max_bytes,
        max_msgs_per_subject=sd.max_msgs_per_subject,
        duplicate_window=sd.duplicate_window_s,
        storage=_storage(bus),
        num_replicas=cfg.replicas,
    )


def consumer_config(cd: ConsumerDef, start_seq: int | None = None) -> js_api.ConsumerConfig:
    return js_api.ConsumerConfig(
        durable_name=cd.durable,
        filter_subject=cd.filter_subject,
        ack_policy=js_api.AckPolicy.EXPLICIT,
        ack_wait=cd.ack_wait_s,
        max_deliver=cd.max_deliver,
        max_ack_pending=cd.max_ack_pending,
        deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE if start_seq else js_api.DeliverPolicy.ALL,
        opt_start_seq=start_seq,
    )


def _storage(bus: Bus) -> js_api.StorageType:
    return js_api.StorageType.FILE if bus.cfg.storage == "file" else js_api.StorageType.MEMORY


def _kinds(bus: Bus) -> list[tuple[str, StreamDef]]:
    return [(sd.name.rsplit("_", 1)[1], sd) for sd in bus.stream_defs()]


async def ensure_topology(bus: Bus) -> list[str]:
    """Create or update every piece of the run's topology (the owner only); returns what it touched."""
    js = bus.js
    touched = []
    for kind, sd in _kinds(bus):
        config = stream_config(bus, sd, kind)
        with _storage_named(bus, sd.name, kind):
            try:
                await js.add_stream(config)
            except BadRequestError:
                # Exists with another config (an upgrade or a new limit): the owner updates it in place.
                await js.update_stream(config)
                log.info("stream_updated", stream=sd.name)
        touched.append(sd.name)
    for bucket, _, create in _buckets(bus):
        try:
            await create()
        except BadRequestError:
            pass  # exists
        touched.append(bucket)
    for kind in ROLE_DURABLES:
        cd = bus.consumer_def(kind)
        await create_consumer(bus, cd)
        touched.append(f"{cd.stream}/{cd.durable}")
    return touched


@contextmanager
def _storage_named(bus: Bus, stream: str, kind: str) -> Iterator[None]:
    """Turn JetStream's bare "insufficient storage resources available" into an error that names
    the stream, its reservation and the config key that sets it."""
    try:
        yield
    except APIError as e:
        if e.err_code != _INSUFFICIENT_STORAGE:
            raise
        key = RESERVING_KEYS.get(kind)
        sized = (f"it reserves bus.{key} = {getattr(bus.cfg, key):,} bytes, and this run's streams "
                 f"{reserved_bytes(bus.cfg):,} in all (bus.scored_max_bytes + bus.dead_max_bytes)"
                 if key else "it reserves no bytes of its own: the store is already fully reserved")
        raise BusStorageError(
            f"JetStream refused to create stream {stream}: {sized}, more than the server's file store "
            "has left to reserve (JetStream error 10047, 'insufficient storage resources available'). "
            "Lower bus.scored_max_bytes, or give the server more: free disk where its store is "
            "(nats-server's default file store is 3/4 of the disk free when it starts) or set "
            "max_file_store in its jetstream config. Every run on the server reserves its own "
            "(docs/faults.md, 'The bus's disk')") from e


def _buckets(bus: Bus) -> list[tuple[str, str, object]]:
    """(bucket, its stream, create) of the run's KV and object-store buckets. KV reads are
    direct gets, whose subject names the key: so permissions can let `ops` read the policy
    version but not the stored config."""
    js, names, cfg = bus.js, bus.names, bus.cfg
    return [
        (names.kv_bucket, f"KV_{names.kv_bucket}", lambda: js.create_key_value(
            bucket=names.kv_bucket, history=1, storage=_storage(bus), replicas=cfg.replicas, direct=True)),
        (names.weights_bucket, f"OBJ_{names.weights_bucket}", lambda: js.create_object_store(
            bucket=names.weights_bucket, storage=_storage(bus), replicas=cfg.replicas)),
        # Samples of groups too large for one message (actors/bodies.py). A body lives as long as the
        # SCORED message or the dead letter that names it can: the learner deletes those it settled,
        # this TTL the rest (dead-lettered groups, orphans of a crash).
        (names.bodies_bucket, f"OBJ_{names.bodies_bucket}", lambda: js.create_object_store(
            bucket=names.bodies_bucket, storage=_storage(bus), replicas=cfg.replicas,
            ttl=max(cfg.scored_max_age_s, cfg.dead_max_age_s))),
    ]


async def repair(bus: Bus) -> list[str]:
    """The owner's pass over its topology: recreate every stream, bucket and role durable that is
    gone (deleted by hand, by a script, by a reset server); returns what it recreated.

    A stream comes back empty: what it held is gone, and the error logged names what follows
    (``_LOST``). The learner's own durable is not here: its consumer recreates it where it was
    reading (``rlvr.actors.consume``)."""
    repaired: list[str] = []
    for kind, sd in _kinds(bus):
        if await _info(bus, sd.name) is None:
            try:
                with _storage_named(bus, sd.name, kind):
                    await bus.js.add_stream(stream_config(bus, sd, kind))
            except BadRequestError:
                continue  # recreated meanwhile (`init`, another pass)
            log.error("stream_recreated", stream=sd.name, gone=_LOST.get(kind, "the messages it held"),
                      note="the stream was deleted; its owner recreated it empty")
            repaired.append(sd.name)
    for bucket, stream, create in _buckets(bus):
        if await _info(bus, stream) is None:
            try:
                await create()
            except BadRequestError:
                continue
            log.error("bucket_recreated", bucket=bucket, note="deleted; recreated empty by its owner")
            repaired.append(bucket)
    for durable in ROLE_DURABLES:
        cd = bus.consumer_def(durable)
        if await _info(bus, f"{cd.stream}/{cd.durable}") is None:
            try:  # never replace one found meanwhile (`create_consumer` would)
                await bus.js.add_consumer(cd.stream, consumer_config(cd))
            except BadRequestError:
                continue
            log.warning("consumer_recreated", stream=cd.stream, durable=cd.durable,
                        note="deleted; recreated by its owner, its replicas bind it again")
            repaired.append(f"{cd.stream}/{cd.durable}")
    return repaired


async def create_consumer(bus: Bus, cd: ConsumerDef, start_seq: int | None = None) -> None:
    """Create the durable ``cd`` (the owner only); an existing one with other settings is replaced,
    and ``start_seq`` always replaces it so that it delivers from that sequence on.

    ``start_seq`` past the end of the stream (its last sequence below ``start_seq - 1``) means the
    stream was deleted and recreated since that position was taken (a purge keeps the
    sequence): ``TopologyLostError``, rather than a consumer that would skip every new message."""
    if start_seq is not None and start_seq > 1:
        info = await bus.js.stream_info(cd.stream)
        if info.state.last_seq < start_seq - 1:
            raise TopologyLostError(lost_message(cd, start_seq, info.state.last_seq))
    config = consumer_config(cd, start_seq)
    if start_seq is not None:
        try:
            await bus.js.delete_consumer(cd.stream, cd.durable)
        except NotFoundError:
            pass
    try:
        await bus.js.add_consumer(cd.stream, config)
    except BadRequestError:
        await bus.js.delete_consumer(cd.stream, cd.durable)
        await bus.js.add_consumer(cd.stream, config)


async def check_topology(bus: Bus, role: str) -> None:
    """Wait for the pieces ``role`` needs, then check their shape; never creates or changes anything."""
    wanted = ROLE_STREAMS.get(role, ("TASKS", "ROLLOUTS", "SCORED", "WEIGHTS", "DEAD"))
    defs = {kind: sd for kind, sd in _kinds(bus) if kind in wanted}
    # The buckets it reads or writes: weights (rollout), bodies (rollout writes them, verify reads them).
    extra = {"rollout": [f"OBJ_{bus.names.weights_bucket}", f"OBJ_{bus.names.bodies_bucket}"],
             "verify": [f"OBJ_{bus.names.bodies_bucket}"]}.get(role, [])
    infos = await _wait_for(bus, [sd.name for sd in defs.values()] + extra, role)
    differ = []
    for kind, sd in defs.items():
        info = infos[sd.name]
        mine = stream_config(bus, sd, kind)
        got = info.config
        if set(got.subjects or []) != set(sd.subjects) or _val(got.retention) != _val(mine.retention):
            raise TopologyMismatchError(
                f"stream {sd.name} has subjects {got.subjects} and retention {_val(got.retention)}; "
                f"this {role} needs {sd.subjects} with {_val(mine.retention)}. Another run or version created it: "
                f"{_OWNER_HINT} with this run's config"
            )
        for field in ("max_age", "max_bytes", "max_msgs_per_subject", "duplicate_window", "num_replicas"):
            theirs, ours = getattr(got, field), getattr(mine, field)
            if _norm(theirs) != _norm(ours):
                differ.append(f"{sd.name}.{field}: stream {theirs}, this role's config {ours}")
    if differ:
        log.info("topology_settings_differ", role=role, differences=differ, note="the learner's settings hold")
    if role in ROLE_DURABLES:
        await check_consumer(bus, bus.consumer_def(role), role)


async def check_consumer(bus: Bus, cd: ConsumerDef, role: str) -> js_api.ConsumerInfo:
    """Wait for the durable ``cd`` and check that it delivers the subject the role expects."""
    info = (await _wait_for(bus, [f"{cd.stream}/{cd.durable}"], role))[f"{cd.stream}/{cd.durable}"]
    cfg = info.config
    if cfg.filter_subject not in (cd.filter_subject, None, "") or _val(cfg.ack_policy) != "explicit":
        raise TopologyMismatchError(
            f"consumer {cd.durable} on {cd.stream} filters {cfg.filter_subject!r} with ack policy "
            f"{_val(cfg.ack_policy)}; this {role} needs {cd.filter_subject!r} with explicit acks"
        )
    return info


def lost_message(cd: ConsumerDef, resume_seq: int, last_seq: int | None, delivered_to: int = 0) -> str:
    """What a reader of ``cd`` lost when its stream was deleted (``delivered_to``: the last
    sequence it was delivered, when it was reading), counted as far as it can be, and what can be done."""
    now = "is gone" if last_seq is None else f"was recreated (it ends at sequence {last_seq})"
    count = (f"at least {delivered_to - resume_seq + 1} messages (sequences {resume_seq} to {delivered_to}, "
             "delivered here and not yet committed) and any stored after them"
             if delivered_to >= resume_seq else f"every message it stored from sequence {resume_seq} on")
    return (
        f"stream {cd.stream} was deleted and {now} while consumer {cd.durable!r} was to read it from "
        f"sequence {resume_seq}: {count} are gone and cannot be accounted for. "
        "Nothing can recreate them: restore the stream from a backup, or start a new run (another `run` id); "
        "restarting does not help"
    )


def _val(enum_or_str: object) -> object:
    # nats-py hands back enums or their plain string values depending on the call.
    return getattr(enum_or_str, "value", enum_or_str)


def _norm(value: object) -> object:
    # The server reports unset limits as -1 or 0; our configs use None for "no limit".
    return None if value in (None, -1, 0) else value


async def _info(bus: Bus, name: str):
    try:
        if "/" in name:
            stream, durable = name.split("/", 1)
            return await bus.js.consumer_info(stream, durable)
        return await bus.js.stream_info(name)
    except NotFoundError:
        return None


async def _wait_for(bus: Bus, names: list[str], role: str) -> dict:
    """Info of each named stream or ``stream/durable``, waiting (bounded) for those still missing."""
    deadline = time.monotonic() + bus.cfg.topology_wait_s
    found: dict = {}
    next_log = 0.0
    while True:
        for name in names:
            if name not in found and (info := await _info(bus, name)) is not None:
                found[name] = info
        missing = [n for n in names if n not in found]
        if not missing:
            return found
        now = time.monotonic()
        if now >= deadline:
            raise TopologyMissingError(
                f"{role}: {', '.join(missing)} still missing after {bus.cfg.topology_wait_s:.0f} s "
                f"(bus.topology_wait_s); {_OWNER_HINT}"
            )
        if now >= next_log:
            log.info("waiting_for_topology", missing=missing, deadline_s=round(deadline - now), owner=_OWNER_HINT)
            next_log = now + 10.0
        await anyio.sleep(min(0.5, max(0.0, deadline - now)))


__all__ = [
    "RESERVING_KEYS",
    "ROLE_DURABLES",
    "ROLE_STREAMS",
    "BusStorageError",
    "TopologyLostError",
    "TopologyMismatchError",
    "TopologyMissingError",
    "check_consumer",
    "check_topology",
    "consumer_config",
    "create_consumer",
    "ensure_topology",
    "lost_message",
    "repair",
    "reserved_bytes",
    "stream_config",
]
