"""WeightsAnnouncement: the learner tells rollout replicas a new policy exists."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

Transport = Literal["object_store", "path", "nccl"]


class WeightFile(Struct, frozen=True, array_like=True):
    name: str  # object name (object_store), or file name under ``location`` (path) / ``fallback_path`` (nccl)
    sha256: str
    bytes: Annotated[int, Meta(ge=0)]


class WeightsAnnouncement(Struct, frozen=True, tag="weights", omit_defaults=True):
    run: str
    version: Annotated[int, Meta(ge=0)]
    step: Annotated[int, Meta(ge=0)]
    transport: Transport
    # Object-store bucket name, a directory path/URI, or for "nccl" (a collective, gloo or
    # NCCL: rlvr.actors.collective) the learner's rendezvous as "<gloo|nccl>://host:port".
    location: str
    files: list[WeightFile]
    dtype: str
    bytes: Annotated[int, Meta(ge=0)]
    created_at: float
    # True when the checkpoint ties lm_head to the embeddings; the blob then
    # still carries ``lm_head.weight`` explicitly (vLLM keeps a stale head otherwise).
    tied_embeddings: bool = False
    v: int = 1
    # True when the files are a LoRA adapter (peft's adapter_model.safetensors and
    # adapter_config.json) for the base model the replica serves, not full weights.
    # A replica that predates the field ignores it and rejects the blob (tensors missing).
    adapter: bool = False
    # "nccl" only: sha256 over the tensors in the order they are broadcast (each name,
    # dtype, shape and raw bytes: rlvr.actors.collective.tensors_sha256).
    tensors_sha256: Annotated[str, Meta(pattern="^([0-9a-f]{64})?$")] = ""
    # "nccl" only: a directory every replica can read holding ``files`` (learn.collective
    # fallback = "path"); "" = a replica whose collective fails asks the learner for the
    # version through the object store instead.
    fallback_path: Annotated[str, Meta(max_length=4096)] = ""


__all__ = ["Transport", "WeightFile", "WeightsAnnouncement"]
