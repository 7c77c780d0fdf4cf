"""Check a directory of safetensors weights before an engine loads it.

A rollout replica receives a full state dict (Hugging Face names, one or more
``*.safetensors`` files, ``lm_head.weight`` present even when tied) from the
learner. Before any byte reaches the model this module checks:

- the files against the announcement's list of (name, sha256, bytes): a
  corrupt or partial download is rejected (``verify_weight_files``);
- each file's safetensors header and its length: a truncated file is
  rejected even without a checksum (``read_weight_index``);
- the tensor names and shapes against what the serving model expects: a
  missing, unknown or mis-shaped tensor is rejected, and so is a blob for a
  tied-embedding model without ``lm_head.weight`` (vLLM would silently keep
  a stale head otherwise) (``check_weight_index``).

Tensors received in memory (the collective transport, rollout/collective.py) go
through the same name, shape and dtype checks: ``index_of_state`` describes them
as ``read_weight_index`` describes a folder.

Every rejection raises ``WeightsRejectedError`` and the engine keeps serving
its old weights. Loading tensors (``load_state_dict``) imports torch lazily;
everything else is standard library only.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from msgspec import Struct

from rlvr.actors.collective import DTYPE_TAGS
from rlvr.protocol.weights import WeightFile

if TYPE_CHECKING:
    import torch

LM_HEAD = "lm_head.weight"
EMBED = "model.embed_tokens.weight"
# Buffers some checkpoints carry and every loader ignores.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
_DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2,
    "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}  # fmt: skip
_FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}


class WeightsRejectedError(ValueError):
    """A weight directory is corrupt, partial or does not fit the model."""


class TensorInfo(Struct, frozen=True):
    file: str
    dtype: str  # safetensors dtype tag: F32, BF16...
    shape: tuple[int, ...]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_weight_files(directory: Path, files: Sequence[WeightFile]) -> None:
    """Check every announced file exists under ``directory`` with its size and sha256."""
    directory = Path(directory)
    if not files:
        raise WeightsRejectedError("the announcement lists no weight files")
    for wf in files:
        if Path(wf.name).name != wf.name or wf.name in ("", ".", ".."):
            raise WeightsRejectedError(f"weight file name {wf.name!r} is not a plain file name")
        path = directory / wf.name
        if not path.is_file():
            raise WeightsRejectedError(f"{path} is missing")
        size = path.stat().st_size
        if size != wf.bytes:
            raise WeightsRejectedError(f"{path}: {size} bytes, announced {wf.bytes} (partial?)")
        digest = _sha256(path)
        if digest != wf.sha256.lower():
            raise WeightsRejectedError(f"{path}: sha256 {digest[:12]}…, announced {wf.sha256[:12]}…")


def _read_header(path: Path) -> dict[str, TensorInfo]:
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise WeightsRejectedError(f"{path}: {size} bytes, too short for a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise WeightsRejectedError(f"{path}: header of {n} bytes in a {size}-byte file")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise WeightsRejectedError(f"{path}: unreadable safetensors header ({e})") from e
    if not isinstance(header, dict):
        raise WeightsRejectedError(f"{path}: safetensors header is not a mapping")
    out: dict[str, TensorInfo] = {}
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (start, stop) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
            width = _DTYPE_BYTES[dtype]
        except (KeyError, TypeError, ValueError) as e:
            raise WeightsRejectedError(f"{path}: bad header entry for {name!r}") from e
        if stop - start != math.prod(shape) * width:
            raise WeightsRejectedError(f"{path}: {name} spans {stop - start} bytes, shape {shape}")
        end = max(end, stop)
        out[name] = TensorInfo(file=path.name, dtype=dtype, shape=shape)
    if 8 + n + end != size:
        raise WeightsRejectedError(f"{path}: {size} bytes, the header describes {8 + n + end} (truncated?)")
    return out


def read_weight_index(directory: Path) -> dict[str, TensorInfo]:
    """Name -> (file, dtype, shape) over all ``*.safetensors`` files in ``directory``."""
    directory = Path(directory)
    paths = sorted(directory.glob("*.safetensors"))
    if not paths:
        raise WeightsRejectedError(f"{directory} holds no *.safetensors file")
    index: dict[str, TensorInfo] = {}
    for path in paths:
        for name, info in _read_header(path).items():
            if name in index:
                raise WeightsRejectedError(f"{name} appears in {index[name].file} and {path.name}")
            index[name] = info
    return index


def check_weight_index(
    index: Mapping[str, TensorInfo], expected: Mapping[str, tuple[int, ...]], *, tied: bool
) -> None:
    """Reject a blob that is not exactly the model's full state dict.

    ``expected`` maps every parameter name the model needs to its shape. For a
    tied model ``lm_head.weight`` is required too: we reject rather than copy
    the embedding, because vLLM reloads from the files on disk and keeps a
    stale head, with no error, when the head is absent.
    """
    if tied and LM_HEAD not in index:
        raise WeightsRejectedError(
            f"tied-embedding model but the blob has no {LM_HEAD}; the publisher must include it"
        )
    missing = sorted(set(expected) - set(index))
    if missing:
        raise WeightsRejectedError(f"{len(missing)} tensors missing, e.g. {missing[:3]}")
    unknown = sorted(n for n in set(index) - set(expected) if not n.endswith(IGNORED_SUFFIXES))
    if unknown:
        raise WeightsRejectedError(f"{len(unknown)} unknown tensors, e.g. {unknown[:3]}")
    for name, shape in expected.items():
        info = index[name]
        if tuple(info.shape) != tuple(shape):
            raise WeightsRejectedError(f"{name}: shape {info.shape}, model has {tuple(shape)}")
        if info.dtype not in _FLOAT_DTYPES:
            raise WeightsRejectedError(f"{name}: dtype {info.dtype} is not a float type")


def expected_from_checkpoint(model_dir: Path, *, tied: bool) -> dict[str, tuple[int, ...]]:
    """The names and shapes a model folder's own checkpoint defines (plus the head if tied)."""
    index = read_weight_index(model_dir)
    expected = {n: i.shape for n, i in index.items() if not n.endswith(IGNORED_SUFFIXES)}
    if tied and LM_HEAD not in expected and EMBED in expected:
        expected[LM_HEAD] = expected[EMBED]
    return expected




def index_of_state(state: Mapping[str, torch.Tensor]) -> dict[str, TensorInfo]:
    """Name -> (file "<memory>", dtype tag, shape) of tensors in memory, for ``check_weight_index``."""
    out = {}
    for name, t in state.items():
        tag = DTYPE_TAGS.get(str(t.dtype).removeprefix("torch."))
        if tag is None:
            raise WeightsRejectedError(f"{name}: dtype {t.dtype} is not a weight dtype")
        out[name] = TensorInfo(file="<memory>", dtype=tag, shape=tuple(t.shape))
    return out


def load_state_dict(directory: Path) -> dict[str, torch.Tensor]:
    """All tensors of the ``*.safetensors`` files in ``directory`` (on CPU)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for path in sorted(Path(directory).glob("*.safetensors")):
        try:
            out.update(load_file(path))
        except (SafetensorError, OSError) as e:
            raise WeightsRejectedError(f"{path}: {e}") from e
    return out


__all__ = [
    "TensorInfo",
    "WeightsRejectedError",
    "check_weight_index",
    "expected_from_checkpoint",
    "index_of_state",
    "load_state_dict",
    "read_weight_index",
    "verify_weight_files",
]
