"""WeightsAnnouncement: the learner tells rollout replicas a new policy exists."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

Transport = Literal["object_store", "path", "nccl"]


class WeightFile(Struct, frozen=True, array_like=True):
    name: str  # object name (object_store) or file name under ``location`` (path)
    sha256: str
    bytes: Annotated[int, Meta(ge=0)]


class WeightsAnnouncement(Struct, frozen=True, tag="weights", omit_defaults=True):
    run: str
    version: Annotated[int, Meta(ge=0)]
    step: Annotated[int, Meta(ge=0)]
    transport: Transport
    # Object-store bucket name, a directory path/URI, or an NCCL group name.
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


__all__ = ["Transport", "WeightFile", "WeightsAnnouncement"]
