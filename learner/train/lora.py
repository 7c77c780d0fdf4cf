"""LoRA in the learner: wrap the policy with peft adapters, export them alone.

With ``[learn.engine.lora] enabled = true`` the engine loads the base model
as usual, ``with_lora`` freezes it and adds adapters (peft) on the
``target_modules``, and only the adapter parameters reach the optimizer.
The rollouts then receive the adapter only (``write_adapter``): peft's
``adapter_model.safetensors`` and ``adapter_config.json``, a few MB instead
of the whole model, loaded on top of the base they already serve.

State dicts here are those of the peft-wrapped module (DeepSpeed's
``module.state_dict()`` or its ZeRO-3 consolidation): keys
``base_model.model.<hf name>`` with ``.base_layer.`` inside adapted
Linear layers and ``.lora_A.default.weight`` / ``.lora_B.default.weight``
beside them. ``merged_state_dict`` turns that into plain Hugging Face names
with the adapter folded in (W + alpha/r * B @ A), for the reference model
and for tests.

QLoRA (``quantize_base = "4bit"``) loads the base through bitsandbytes in
NF4; it needs a CUDA device, and on CPU ``base_load_kwargs`` refuses it with
an error naming the key. Not covered: DoRA, rsLoRA, ``modules_to_save``
(vLLM serves none of them), and merging a 4-bit base.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

import torch

from rlvr.learner.engine_config import LoraConfig
from rlvr.learner.weights.state_dict import write_safetensors

ADAPTER = "default"  # peft's adapter name in the learner
PREFIX = "base_model.model."  # what peft puts before the Hugging Face names
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_STEM = "adapter_model"  # adapter_model.safetensors: the name peft and vLLM look for


class LoraConfigError(ValueError):
    """A ``[learn.engine.lora]`` setting that cannot work with this model or device."""


def base_load_kwargs(cfg: LoraConfig) -> dict[str, Any]:
    """Extra ``from_pretrained`` arguments for the base: a 4-bit quantization
    config for QLoRA (CUDA with bitsandbytes only), otherwise none."""
    if not cfg.enabled or cfg.quantize_base == "none":
        return {}
    if not torch.cuda.is_available():
        raise LoraConfigError(
            'learn.engine.lora.quantize_base = "4bit" (QLoRA) needs a CUDA device with bitsandbytes; '
            'it does not apply on CPU: set it to "none"'
        )
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as e:
        raise LoraConfigError(
            f'learn.engine.lora.quantize_base = "4bit" needs the bitsandbytes package ({e})'
        ) from None
    from transformers import BitsAndBytesConfig

    return {
        "quantization_config": BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=torch.bfloat16,
            bnb_4bit_use_double_quant=True,
        )
    }


def with_lora(model: torch.nn.Module, cfg: LoraConfig, *, gradient_checkpointing: bool = False) -> torch.nn.Module:
    """The peft-wrapped model: base frozen, adapters (B = 0, so the policy is
    unchanged at first) trainable on every module named in ``target_modules``."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    if cfg.quantize_base == "4bit":
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)
    peft_cfg = PeftLoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        wrapped = get_peft_model(model, peft_cfg, adapter_name=ADAPTER)
    except ValueError as e:  # peft: "Target modules {...} not found in the base model"
        raise LoraConfigError(f"learn.engine.lora.target_modules = {list(cfg.target_modules)}: {e}") from None
    if gradient_checkpointing:
        # The frozen embeddings' output needs a grad for checkpointed blocks to back-propagate.
        wrapped.enable_input_require_grads()
    return wrapped


def merged_state_dict(state: Mapping[str, torch.Tensor], cfg: LoraConfig) -> dict[str, torch.Tensor]:
    """Hugging Face names with every adapter folded into its base weight:
    W' = W + (alpha / r) * B @ A, W: [out, in], B: [out, r], A: [r, in]."""
    scale = cfg.alpha / cfg.rank
    lora_a, lora_b = f".lora_A.{ADAPTER}.weight", f".lora_B.{ADAPTER}.weight"
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.endswith((lora_a, lora_b)):
            continue
        name = key.removeprefix(PREFIX).replace(".base_layer.", ".")
        if key.endswith(".base_layer.weight"):
            layer = key[: -len(".base_layer.weight")]
            a, b = state[layer + lora_a], state[layer + lora_b]
            value = (value.float() + scale * (b.float() @ a.float())).to(value.dtype)
        out[name] = value
    return out


def adapter_state_dict(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapter's tensors under peft's saved names (``...q_proj.lora_A.weight``)."""
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(model, state_dict=dict(state), adapter_name=ADAPTER)


def write_adapter(
    model: torch.nn.Module, state: Mapping[str, torch.Tensor], directory: Path, *, dtype: torch.dtype
) -> list[tuple[str, str, int]]:
    """Write ``adapter_model.safetensors`` and ``adapter_config.json`` (what
    peft's ``from_pretrained`` and vLLM's LoRA loader read) into ``directory``;
    returns (file name, sha256, bytes) for both, the config last."""
    directory = Path(directory)
    files = write_safetensors(adapter_state_dict(model, state), directory, dtype=dtype, stem=ADAPTER_STEM)
    config = model.peft_config[ADAPTER].to_dict()
    config["inference_mode"] = True
    config["target_modules"] = sorted(config["target_modules"])
    data = json.dumps(config, indent=1, sort_keys=True, default=_jsonable).encode()
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{ADAPTER_CONFIG}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, directory / ADAPTER_CONFIG)
    return [*files, (ADAPTER_CONFIG, hashlib.sha256(data).hexdigest(), len(data))]


def _jsonable(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    return str(value)  # enums (task_type) and the like


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """What the optimizer gets: every parameter that requires a gradient."""
    return [p for p in model.parameters() if p.requires_grad]


__all__ = [
    "ADAPTER_CONFIG",
    "LoraConfigError",
    "adapter_state_dict",
    "base_load_kwargs",
    "merged_state_dict",
    "trainable_parameters",
    "with_lora",
    "write_adapter",
]
