"""Check a LoRA adapter directory before an engine applies it to its base.

A LoRA run's learner publishes peft's ``adapter_model.safetensors`` and
``adapter_config.json`` (learner/train/lora.py). The config is untrusted input like
any blob, so before peft or vLLM reads it this module checks:

- the config: a bounded JSON object of a plain LoRA adapter (``peft_type``
  LORA, an integer rank within the replica's limit, a finite alpha, a list
  of target module names; no DoRA, no per-layer ranks, no extra trained
  modules, which neither engine here would apply faithfully);
- the tensors: exactly the adapter's own keys, derived from the base model's
  Linear weights and the config (``<module>.lora_A.weight`` of shape
  [r, in] and ``<module>.lora_B.weight`` of shape [out, r] for every base
  module whose last name is a target), float, with the header length
  checked as for full weights (rollout/weights.py).

Every rejection raises ``WeightsRejectedError``; the engine keeps its
current adapter. Standard library only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from msgspec import Struct

from rlvr.rollout.weights import WeightsRejectedError, check_weight_index, read_weight_index

ADAPTER_CONFIG = "adapter_config.json"
PEFT_PREFIX = "base_model.model."
MAX_CONFIG_BYTES = 1 << 20


class AdapterSpec(Struct, frozen=True):
    rank: int
    alpha: float
    target_modules: tuple[str, ...]


def read_adapter_config(directory: Path, *, max_rank: int | None = None) -> AdapterSpec:
    """The checked rank, alpha and targets of ``directory/adapter_config.json``."""
    path = Path(directory) / ADAPTER_CONFIG
    if not path.is_file():
        raise WeightsRejectedError(f"{path} is missing: not a LoRA adapter directory")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise WeightsRejectedError(f"{path}: {path.stat().st_size} bytes, more than {MAX_CONFIG_BYTES}")
    try:
        cfg = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WeightsRejectedError(f"{path}: not JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise WeightsRejectedError(f"{path}: not a JSON object")

    def bad(key: str, why: str) -> WeightsRejectedError:
        return WeightsRejectedError(f"{path}: {key} = {cfg.get(key)!r}: {why}")

    if cfg.get("peft_type") != "LORA":
        raise bad("peft_type", "only LORA adapters are served")
    rank = cfg.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise bad("r", "the rank must be a positive integer")
    if max_rank is not None and rank > max_rank:
        raise bad("r", f"above this replica's max_lora_rank {max_rank}")
    alpha = cfg.get("lora_alpha")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha) or alpha <= 0:
        raise bad("lora_alpha", "must be a finite positive number")
    targets = cfg.get("target_modules")
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) and t for t in targets):
        raise bad("target_modules", "must be a non-empty list of module names")
    for key in ("use_dora", "use_rslora"):
        if cfg.get(key):
            raise bad(key, "not supported by the rollout engines here")
    for key in ("rank_pattern", "alpha_pattern", "modules_to_save", "layers_to_transform"):
        if cfg.get(key):
            raise bad(key, "per-layer settings and extra trained modules are not supported")
    return AdapterSpec(rank=rank, alpha=float(alpha), target_modules=tuple(targets))


def expected_adapter_shapes(
    base_shapes: Mapping[str, tuple[int, ...]], spec: AdapterSpec
) -> dict[str, tuple[int, ...]]:
    """The adapter's tensor names and shapes for a base model's state dict
    shapes (Hugging Face names, ``<module>.weight`` of [out, in] for a Linear)."""
    targets = set(spec.target_modules)
    out: dict[str, tuple[int, ...]] = {}
    for name, shape in base_shapes.items():
        if not name.endswith(".weight") or len(shape) != 2:
            continue
        module = name[: -len(".weight")]
        if module.rsplit(".", 1)[-1] in targets:
            d_out, d_in = shape
            out[f"{PEFT_PREFIX}{module}.lora_A.weight"] = (spec.rank, d_in)
            out[f"{PEFT_PREFIX}{module}.lora_B.weight"] = (d_out, spec.rank)
    if not out:
        raise WeightsRejectedError(f"target_modules {list(spec.target_modules)} match no Linear of the base model")
    return out


def check_adapter(
    directory: Path, base_shapes: Mapping[str, tuple[int, ...]], *, max_rank: int | None = None
) -> AdapterSpec:
    """Check an adapter directory's config and tensors against the base model; its spec."""
    spec = read_adapter_config(directory, max_rank=max_rank)
    index = read_weight_index(directory)
    check_weight_index(index, expected_adapter_shapes(base_shapes, spec), tied=False)
    return spec


__all__ = ["ADAPTER_CONFIG", "AdapterSpec", "check_adapter", "expected_adapter_shapes", "read_adapter_config"]
