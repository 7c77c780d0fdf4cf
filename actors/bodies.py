"""Groups larger than a message: their samples in the run's bodies bucket, the message a reference.

A group message (``SampleGroup``, ``ScoredGroup``) must fit the server's ``max_payload`` (8 MB in the
shipped configs and under ``up``): about 460k tokens of samples. An agent's episode may be longer,
so ``publish_group`` stores a group that does not fit as a ``GroupBody`` object named
``<task_id>/<sha256>`` in the run's bodies bucket (``RunNames.bodies_bucket``) and publishes the
group with ``samples = []`` and ``body = BodyRef(name, sha256, size)``. ``resolve`` reads it back
for the verifier and the learner: the name, the size and the SHA-256 are checked against the
reference, the bytes decoded by the project's codec, and the group validated exactly as one that
came inline (``check_sample_group`` / ``check_scored_group``). A reference that names nothing, or
other bytes, is a ``BodyRefusedError`` whose reason names the field: the caller dead-letters it. A
transient bus fault (a timeout, no leader) is raised as it is: the consumer retries in place.

Who writes: only the rollout. A ``SampleGroup`` goes inline up to half the room of a message, so
that its ``ScoredGroup`` (the same samples and a verdict each, which may quote the text) fits
whole; past it, by reference. The verifier publishes its ``ScoredGroup`` with its input's
reference (``stored``) and never writes a body; an inline input whose verdicts still push its
``ScoredGroup`` past the room is a ``GroupTooLargeError`` (dead-lettered with the sizes). Deleting a
body is the learner's, once the SCORED message that named it is settled and committed
(learner/intake.py); the bucket's TTL (``actors/topology.py``) removes the rest: bodies of groups
dead-lettered (their letters stay readable with them) or orphaned by a crash.

Not here: what each role does with a refusal, and the bucket's creation (``actors/topology.py``).
"""

from __future__ import annotations

import hashlib
import io

import anyio
import msgspec
from nats.js import api as js_api
from nats.js.errors import BadObjectMetaError, DigestMismatchError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from rlvr.actors.bus import Bus
from rlvr.actors.logs import get_logger
from rlvr.protocol import MessageDecodeError, decode, encode
from rlvr.protocol.groups import BodyRef, GroupBody, SampleGroup, ScoredGroup, body_name
from rlvr.protocol.validate import MessageInvalidError, check_body_ref, check_sample_group, check_scored_group

log = get_logger("rlvr.bodies")

# Room a message leaves for its headers (Nats-Msg-Id up to ~560 characters, traceparent, the dead
# letter's own fields): the server's max_payload bounds headers and payload together.
HEADER_ROOM = 16 * 1024
# Chunks of a stored body: fewer round trips than nats-py's 128 KiB, and far under any max_payload.
CHUNK_BYTES = 1 << 20

Group = SampleGroup | ScoredGroup


class GroupTooLargeError(ValueError):
    """A group that cannot be published: its body past ``bus.max_group_bytes``, or a ScoredGroup past
    the server's max_payload with no body to refer to. ``reason`` names the key and the sizes."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BodyRefusedError(ValueError):
    """A reference that names no body of this run, or other bytes: ``reason`` names the field."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def message_room(bus: Bus) -> int:
    """Bytes of payload one message may carry on this server (its real max_payload, from INFO)."""
    return bus.nc.max_payload - HEADER_ROOM


def _store(bus: Bus) -> ObjectStore:
    # Bound directly: ``js.object_store`` would ask for the stream's info on every call.
    bucket = bus.names.bodies_bucket
    return ObjectStore(name=bucket, stream=f"OBJ_{bucket}", js=bus.js)


async def publish_group(bus: Bus, subject: str, group: Group, msg_id: str, *, stored: BodyRef | None = None) -> None:
    """Publish ``group`` to ``subject`` under ``msg_id`` and wait for its PubAck: inline when it fits,
    else its samples to the bodies bucket and the message by reference. ``stored``: the samples are in
    the bucket already under that reference (a verifier's input's), so the message refers to it and
    nothing is written. Raises ``GroupTooLargeError`` for a group no bound allows."""
    room = message_room(bus)
    if stored is not None:
        data = encode(msgspec.structs.replace(group, samples=[], body=stored))
        if len(data) > room:
            raise GroupTooLargeError(f"the verdicts of group {group.task_id} are {len(data)} bytes, more than a "
                                     f"message holds on this server (max_payload {bus.nc.max_payload})")
        await _send(bus, subject, data, msg_id)
        return
    data = encode(group)
    # A SampleGroup leaves half the room to the verdicts its ScoredGroup adds (a verdict may quote the
    # whole text): then the verifier never has to write a body.
    limit = room // 2 if isinstance(group, SampleGroup) else room
    if len(data) <= limit:
        await _send(bus, subject, data, msg_id)
        return
    if isinstance(group, ScoredGroup):
        raise GroupTooLargeError(
            f"ScoredGroup {group.task_id} is {len(data)} bytes, more than a message holds on this server "
            f"(max_payload {bus.nc.max_payload}), and its samples came inline: its verdicts are larger than "
            "the samples (the verifier never writes a body)")
    ref = await store_body(bus, group)
    await _send(bus, subject, encode(msgspec.structs.replace(group, samples=[], body=ref)), msg_id)


async def _send(bus: Bus, subject: str, data: bytes, msg_id: str) -> None:
    (result,) = await bus.pub_acks([await bus.send(subject, data, bus.headers_for(msg_id))])
    if isinstance(result, Exception):
        raise result


def _encoded_body(samples: list) -> tuple[bytes, str]:
    data = encode(GroupBody(samples))
    return data, hashlib.sha256(data).hexdigest()


async def store_body(bus: Bus, group: SampleGroup) -> BodyRef:
    """Put ``group``'s samples in the bodies bucket; its reference. The name is the bytes' digest, so an
    object already there under it holds these very bytes (a group published again): it is not
    written twice."""
    data, sha = await anyio.to_thread.run_sync(_encoded_body, group.samples)  # ~1 s a GB: off the loop
    if len(data) > bus.cfg.max_group_bytes:
        raise GroupTooLargeError(f"the samples of group {group.task_id} are {len(data)} bytes, more than "
                                 f"bus.max_group_bytes = {bus.cfg.max_group_bytes}")
    ref = BodyRef(body_name(group.task_id, sha), sha, len(data))
    store = _store(bus)
    try:
        if (await store.get_info(ref.name)).size == ref.size:
            return ref
    except ObjectNotFoundError:
        pass
    chunk = max(1, min(CHUNK_BYTES, message_room(bus) // 2))
    meta = js_api.ObjectMeta(name=ref.name, options=js_api.ObjectMetaOptions(max_chunk_size=chunk))
    await store.put(ref.name, data, meta=meta)
    log.info("group_body_stored", task_id=group.task_id, bytes=ref.size, bucket=bus.names.bodies_bucket)
    return ref


async def resolve(bus: Bus, group: Group) -> Group:
    """``group`` with its samples: as it is when it came inline, else read from the bodies bucket and
    validated as a group that came inline (its ``body`` then None). Raises ``BodyRefusedError`` (the
    reference) or ``MessageInvalidError`` (the samples), each naming the field; a bus fault as raised."""
    ref = group.body
    if ref is None:
        return group
    try:
        check_body_ref(group.task_id, ref)  # admission checked it; a caller that did not is not trusted
    except MessageInvalidError as e:
        raise BodyRefusedError(e.reason) from None
    if ref.size > bus.cfg.max_group_bytes:
        raise BodyRefusedError(f"body.size is {ref.size} bytes, more than bus.max_group_bytes = "
                               f"{bus.cfg.max_group_bytes}")
    store, bucket = _store(bus), bus.names.bodies_bucket
    missing = (f"body.name {ref.name!r} names no object in this run's bucket {bucket} (never stored, or deleted "
               "once a copy of its group was settled)")
    try:
        info = await store.get_info(ref.name)
        if info.size != ref.size:
            raise BodyRefusedError(f"body.size is {ref.size} but the object {ref.name!r} holds {info.size} bytes")
        out = io.BytesIO()
        await store.get(ref.name, writeinto=out)  # chunk by chunk: nats-py's own buffer grows quadratically
    except ObjectNotFoundError:
        raise BodyRefusedError(missing) from None
    except (BadObjectMetaError, DigestMismatchError) as e:
        raise BodyRefusedError(f"body.name {ref.name!r}: the object is damaged ({type(e).__name__})") from None
    # A view of the buffer, not a copy of it: a body is up to bus.max_group_bytes.
    return await anyio.to_thread.run_sync(_checked, group, ref, out.getbuffer())


def _checked(group: Group, ref: BodyRef, data: memoryview) -> Group:
    """The group with the samples ``data`` holds, once they are proved to be the ones ``ref`` names."""
    if len(data) != ref.size:
        raise BodyRefusedError(f"body.size is {ref.size} but {len(data)} bytes were read")
    if (sha := hashlib.sha256(data).hexdigest()) != ref.sha256:
        raise BodyRefusedError(f"body.sha256 is {ref.sha256} but the object's bytes hash to {sha}")
    try:
        body = decode(data, GroupBody)
    except MessageDecodeError as e:
        raise BodyRefusedError(f"body: {e.kind}: {e.reason}") from None
    resolved = msgspec.structs.replace(group, samples=body.samples, body=None)
    if isinstance(resolved, SampleGroup):
        check_sample_group(resolved)
    else:
        check_scored_group(resolved)
    return resolved


async def delete_bodies(bus: Bus, names: list[str]) -> int:
    """Delete these bodies (the learner, once their groups' fates are committed); how many were there."""
    store, deleted = _store(bus), 0
    for name in names:
        try:
            await store.delete(name)
            deleted += 1
        except ObjectNotFoundError:
            pass  # deleted already (an earlier pass), or gone with the bucket's TTL
    return deleted


__all__ = ["BodyRefusedError", "GroupTooLargeError", "delete_bodies", "message_room", "publish_group", "resolve",
           "store_body"]
