"""Write a consolidated state dict as safetensors shards with their sha256.

This is the publishing format of the learner: rollout replicas load these
files (``hf`` through transformers, ``vllm`` through ``reload_weights``).
Every tensor is cast to the export dtype and cloned, which also breaks the
storage shared by tied embeddings: safetensors refuses shared tensors, and
vLLM needs ``lm_head.weight`` present even when it is tied.

Each file is written under a temporary name and renamed, so a reader never
sees half a file. The sha256 is of the bytes on disk.

Not covered: gathering the state dict from DeepSpeed (engine.py) and
moving the files to the object store (the learner actor).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Mapping

import torch
from safetensors.torch import save as safetensors_bytes

EXPORT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
INDEX_NAME = "model.safetensors.index.json"


def with_tied_head(
    state_dict: dict[str, torch.Tensor],
    *,
    head_key: str = "lm_head.weight",
    embed_key: str = "model.embed_tokens.weight",
) -> dict[str, torch.Tensor]:
    """Add ``head_key`` as a copy of ``embed_key`` when it is missing."""
    if head_key not in state_dict and embed_key in state_dict:
        state_dict = dict(state_dict)
        state_dict[head_key] = state_dict[embed_key]
    return state_dict


def _write_atomic(path: Path, data: bytes) -> tuple[str, int]:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return hashlib.sha256(data).hexdigest(), len(data)


def _shards(tensors: dict[str, torch.Tensor], max_shard_bytes: int) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nbytes
    return shards


def write_safetensors(
    state_dict: Mapping[str, torch.Tensor],
    directory: Path,
    *,
    dtype: torch.dtype,
    max_shard_bytes: int = 1 << 30,
    stem: str = "model",
) -> list[tuple[str, str, int]]:
    """Write ``state_dict`` to ``directory`` as safetensors.

    One file ``model.safetensors`` when it fits in ``max_shard_bytes``,
    otherwise ``model-0000i-of-0000n.safetensors`` plus the Hugging Face
    index ``model.safetensors.index.json`` (``stem`` replaces ``model``:
    a LoRA adapter is ``adapter_model.safetensors``). Floating tensors are cast to
    ``dtype``. Returns (file name, sha256 hex, bytes) for every file written,
    the index last.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {
        k: (v.detach().to("cpu", dtype=dtype) if v.is_floating_point() else v.detach().cpu()).contiguous().clone()
        for k, v in state_dict.items()
    }
    shards = _shards(tensors, max_shard_bytes)
    files: list[tuple[str, str, int]] = []
    weight_map: dict[str, str] = {}
    for i, shard in enumerate(shards):
        name = f"{stem}.safetensors" if len(shards) == 1 else f"{stem}-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        digest, size = _write_atomic(directory / name, safetensors_bytes(shard, metadata={"format": "pt"}))
        files.append((name, digest, size))
        weight_map.update({k: name for k in shard})
    if len(shards) > 1:
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        index = json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1).encode()
        index_name = INDEX_NAME.replace("model", stem, 1)
        files.append((index_name, *_write_atomic(directory / index_name, index)))
    return files


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


__all__ = ["EXPORT_DTYPES", "INDEX_NAME", "sha256_file", "with_tied_head", "write_safetensors"]
