"""Publish a new policy: blob first, announcement second, KV last.

Object-store transport: each safetensors file becomes the object
``v<version>/<file>`` in the run's weights bucket, streamed from disk in
chunks; versions older than the previous one are deleted afterwards, so a
replica still fetching version v-1 is not cut off. Path transport: the files
stay where the learner wrote them (a shared filesystem) and the announcement
names the directory. The announcement goes out only after every byte is
stored, so a replica never sees a version it cannot fetch; it carries each
file's sha256 and size, and the replica checks them before loading. A LoRA
run publishes its adapter the same way, flagged ``adapter`` in the
announcement (adapter_model.safetensors + adapter_config.json).

Collective transport (``"nccl"``, gloo or NCCL: learner/weights/collective.py): the
announcement names the rendezvous (``location``), the tensors' sha256 and bytes
(``nbytes``), and the exported files only when there are some (``fallback_path``:
the fallback is a shared path); the tensors themselves go out by broadcast after it. ``msg_id_suffix`` lets the
learner publish a second announcement of one version (the object-store copy a
replica asked for after its collective failed) past the duplicate window.
"""

from __future__ import annotations

import time
from pathlib import Path

from rlvr.actors.bus import Bus
from rlvr.actors.logs import get_logger
from rlvr.protocol import WeightFile, WeightsAnnouncement
from rlvr.protocol.subjects import KV_POLICY_VERSION

log = get_logger("rlvr.learner.weights.publish")


async def publish_weights(
    bus: Bus,
    directory: Path,
    files: list[tuple[str, str, int]],
    *,
    version: int,
    step: int,
    dtype: str,
    tied_embeddings: bool,
    transport: str = "object_store",
    adapter: bool = False,
    location: str = "",
    tensors_sha256: str = "",
    fallback_path: str = "",
    msg_id_suffix: str = "",
    nbytes: int | None = None,
) -> WeightsAnnouncement:
    if transport == "object_store":
        store = await bus.js.object_store(bus.names.weights_bucket)
        wire_files = []
        for name, sha, size in files:
            obj = f"v{version}/{name}"
            with open(directory / name, "rb") as f:
                await store.put(obj, f)
            wire_files.append(WeightFile(obj, sha, size))
        location = bus.names.weights_bucket
    elif transport == "nccl":
        if not location:
            raise ValueError("the nccl transport needs the rendezvous location")
        wire_files = [WeightFile(name, sha, size) for name, sha, size in files]
    else:
        wire_files = [WeightFile(name, sha, size) for name, sha, size in files]
        location = str(directory.resolve())
    ann = WeightsAnnouncement(
        run=bus.names.run,
        version=version,
        step=step,
        transport=transport,  # type: ignore[arg-type]
        location=location,
        files=wire_files,
        dtype=dtype,
        bytes=sum(size for _, _, size in files) if nbytes is None else nbytes,
        created_at=time.time(),
        tied_embeddings=tied_embeddings,
        adapter=adapter,
        tensors_sha256=tensors_sha256,
        fallback_path=fallback_path,
    )
    await bus.publish(bus.names.weights, ann, msg_id=f"weights/{version}{msg_id_suffix}")
    await bus.kv_put(KV_POLICY_VERSION, str(version).encode())
    if transport == "object_store":
        await _prune(bus, keep_from=version - 1)
    return ann


async def _prune(bus: Bus, keep_from: int) -> None:
    store = await bus.js.object_store(bus.names.weights_bucket)
    try:
        infos = await store.list()
    except Exception:  # empty bucket raises NotFound in nats-py
        return
    for info in infos:
        head = info.name.split("/", 1)[0]
        if head.startswith("v") and head[1:].isdigit() and int(head[1:]) < keep_from:
            try:
                await store.delete(info.name)
            except Exception as e:  # best effort; the bucket stays correct either way
                log.debug("weights_prune_failed", name=info.name, error=repr(e))
