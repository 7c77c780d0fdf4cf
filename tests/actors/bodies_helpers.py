"""Groups too large for one message, and a bus to store and read them on, for the bodies tests."""

from __future__ import annotations

import hashlib
import json

import msgspec
from nats.js.object_store import ObjectStore

from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.protocol import (Completion, RunNames, Sample, SampleGroup, SamplingParams, ScoredGroup, Verdict,
                           VerifierSpec, encode)
from rlvr.protocol.groups import BodyRef, GroupBody

BIG = 60_000  # tokens: a sample of ~600 kB


def long_sample(run: str, task_id: str, i: int, n: int, tokens: int, *, vocab: int = 50) -> Sample:
    """Sample ``i`` of task ``task_id``'s group of ``n``, with a completion of ``tokens`` token ids."""
    ids = [3 + (k * 7 + i) % (vocab - 3) for k in range(tokens)]
    return Sample(
        run=run, task_id=task_id, sample_index=i, group_id=task_id, group_size=n, prompt_ids=[1, 2, 3],
        completion=Completion(ids, [-0.5] * tokens), text=f"long answer {i}", finish_reason="length",
        policy_version=0, policy_version_max=0, verifier=VerifierSpec("exact", {"gold": "1"}),
        sampling=SamplingParams(max_tokens=max(1, tokens)), replica="test",
    )


def long_group(run: str, task_id: str, tokens: list[int], *, vocab: int = 50) -> SampleGroup:
    """Task ``task_id``'s group, one sample per entry of ``tokens`` with that many completion tokens."""
    n = len(tokens)
    return SampleGroup(run, task_id, [long_sample(run, task_id, i, n, t, vocab=vocab) for i, t in enumerate(tokens)])


def scored(group: SampleGroup, rewards: list[float] | None = None) -> ScoredGroup:
    """``group`` scored: rewards alternate 1, 0 unless given (a group with a signal)."""
    rewards = rewards or [float(i % 2 == 0) for i in range(len(group.samples))]
    verdicts = [Verdict(r, "ok" if r else "wrong", "exact") for r in rewards]
    return ScoredGroup(group.run, group.task_id, group.samples, verdicts, replica="verify-test")  # type: ignore[arg-type]


async def owner_bus(url: str, run: str, **bus: object) -> Bus:
    """A bus of ``run`` that created its topology (as the learner does)."""
    b = await client_bus(url, run, **bus)
    await b.ensure_topology()
    return b


async def client_bus(url: str, run: str, **bus: object) -> Bus:
    """A bus of ``run`` that only connects (beside a learner that owns the topology)."""
    return await Bus.connect(NatsConfig(url=url, connect_timeout_s=5.0), BusConfig(**bus), RunNames(run), "test")


async def stored_bodies(bus: Bus, bucket: str | None = None) -> dict[str, int]:
    """Name -> size of every object in a bodies bucket (the run's by default), deleted ones left out:
    read from each object's last meta message (nats-py's ``list`` can stop short)."""
    bucket = bucket or bus.names.bodies_bucket
    stream = f"OBJ_{bucket}"
    info = await bus.js.stream_info(stream, subjects_filter=f"$O.{bucket}.M.>")
    out = {}
    for subject in info.state.subjects or {}:
        meta = json.loads((await bus.js.get_last_msg(stream, subject)).data)
        if not meta.get("deleted"):
            out[meta["name"]] = meta["size"]
    return out


async def put_object(bus, name: str, data: bytes, bucket: str | None = None) -> None:
    bucket = bucket or bus.names.bodies_bucket
    await ObjectStore(name=bucket, stream=f"OBJ_{bucket}", js=bus.js).put(name, data)


def _body(group: SampleGroup) -> tuple[bytes, str]:
    data = encode(GroupBody(group.samples))
    return data, hashlib.sha256(data).hexdigest()


def hostile_references(run: str):
    """Set-ups, one per hostile reference of a group of ``run``: each, given ``run``'s bus, another run's
    (``otherrun``) and the task id of the message, stores what it needs and returns the message (a
    SampleGroup) and the field its refusal names."""
    from rlvr.actors.bodies import store_body

    def body_name(task_id: str, sha: str) -> str:
        return f"{task_id}/{sha}"

    async def another_task(bus, other, task):
        ref = await store_body(bus, long_group(run, f"{run}-other", [BIG]))  # a real body, of task "other"
        return SampleGroup(run, task, [], body=ref), "body.name"

    async def another_run_prefix(bus, other, task):
        ref = await store_body(bus, long_group(run, task, [BIG]))
        return SampleGroup(run, task, [], body=BodyRef(f"rlvr-other-bodies/{ref.name}", ref.sha256, ref.size)), \
            "body.name"

    async def another_run_s_object(bus, other, task):
        # The very name and bytes, stored in another run's bucket: no name can reach it.
        ref = await store_body(other, long_group(run, task, [BIG]))
        return SampleGroup(run, task, [], body=ref), "body.name"

    async def nothing(bus, other, task):
        data, sha = _body(long_group(run, task, [BIG]))
        return SampleGroup(run, task, [], body=BodyRef(body_name(task, sha), sha, len(data))), "body.name"

    async def wrong_sha256(bus, other, task):
        data, _ = _body(long_group(run, task, [BIG]))
        forged = hashlib.sha256(b"forged").hexdigest()
        await put_object(bus, body_name(task, forged), data)  # other bytes under the name of a digest
        return SampleGroup(run, task, [], body=BodyRef(body_name(task, forged), forged, len(data))), "body.sha256"

    async def wrong_size(bus, other, task):
        ref = await store_body(bus, long_group(run, task, [BIG]))
        return SampleGroup(run, task, [], body=msgspec.structs.replace(ref, size=ref.size - 1)), "body.size"

    async def past_the_bound(bus, other, task):
        ref = await store_body(bus, long_group(run, task, [BIG]))
        return SampleGroup(run, task, [], body=msgspec.structs.replace(ref, size=(1 << 30) + 1)), "body.size"

    async def not_a_body(bus, other, task):
        data = b"\xc1" * 1000  # not msgpack
        sha = hashlib.sha256(data).hexdigest()
        await put_object(bus, body_name(task, sha), data)
        return SampleGroup(run, task, [], body=BodyRef(body_name(task, sha), sha, len(data))), "body: malformed"

    async def another_task_s_samples(bus, other, task):
        # Its own name and digest, but the samples of another task: validated as an inline group is.
        data, sha = _body(long_group(run, f"{run}-other", [BIG]))
        await put_object(bus, body_name(task, sha), data)
        return SampleGroup(run, task, [], body=BodyRef(body_name(task, sha), sha, len(data))), "samples[0] is of run"

    return [another_task, another_run_prefix, another_run_s_object, nothing, wrong_sha256, wrong_size,
            past_the_bound, not_a_body, another_task_s_samples]


