"""Model FLOPs of a training step, and MFU against the device's peak.

Model FLOPs follow PaLM (Chowdhery et al. 2022, appendix B): per token of a
sequence of length S, forward plus backward,

    6 * N + 12 * L * d * S

where N counts the parameters that multiply activations (all of them,
except the input embedding table when it is not tied to the output head:
a lookup is no matmul), L is the number of layers, d the hidden size, and
the second term is attention's QK^T and AV products (not halved for the
causal mask, as in PaLM). S is each sample's own length (a padded row's
non-padding length; in a packed row each sample attends only within
itself), so a step's FLOPs are 6 * N * tokens + 12 * L * d * sum over
samples of S^2. Padding, the recomputation of gradient checkpointing and of the chunked
log-probs, and the reference model's forward are not counted: those are
hardware FLOPs, not model FLOPs.

    model_tflops_per_s = step FLOPs / step seconds / 1e12
    mfu = model_tflops_per_s / the device's dense bf16 peak

``mfu`` is only given for bf16 training on a CUDA device in PEAK_BF16_TFLOPS;
on CPU, in fp32, or on an unknown device only ``model_tflops_per_s`` is.
With LoRA the same formula is used (the frozen weights still cost their
forward and their share of the backward); it then overstates the work a
little, as the frozen weights need no weight gradient.

Not covered: measuring hardware FLOPs (a profiler's job).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import torch

# Dense (no sparsity) bf16 tensor-core peaks, in TFLOP/s, from the vendor's
# datasheets; matched as substrings of torch.cuda.get_device_name, first match wins.
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756.0),
    ("H100", 989.4),  # SXM
    ("H200", 989.4),  # and GH200
    ("H800", 989.4),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.1),
    ("L4", 121.0),
)


def _numel(p: torch.Tensor) -> int:
    return int(getattr(p, "ds_numel", p.numel()))  # a ZeRO-3 parameter is empty outside its gather


def matmul_parameters(model: torch.nn.Module) -> int:
    """N: every parameter except an untied input embedding table."""
    total = sum(_numel(p) for p in model.parameters())
    embedding = model.get_input_embeddings()
    head = model.get_output_embeddings()
    if embedding is not None and (head is None or getattr(head, "weight", None) is not embedding.weight):
        total -= _numel(embedding.weight)
    return total


def step_flops(n_params: int, layers: int, hidden: int, row_lengths: Sequence[int]) -> float:
    """Model FLOPs of forward + backward over rows of these non-padding lengths."""
    tokens = sum(row_lengths)
    return 6.0 * n_params * tokens + 12.0 * layers * hidden * float(sum(s * s for s in row_lengths))


@lru_cache(maxsize=None)
def _device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def peak_for_device_name(name: str) -> float | None:
    """The dense bf16 peak of a CUDA device by its name, or None when unknown."""
    return next((peak for key, peak in PEAK_BF16_TFLOPS if key in name), None)


def peak_bf16_tflops(device: torch.device) -> float | None:
    """The device's dense bf16 peak, or None (CPU, unknown GPU)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return peak_for_device_name(_device_name(device.index if device.index is not None else torch.cuda.current_device()))


def throughput_metrics(
    model: torch.nn.Module, attention_masks: Sequence[torch.Tensor], seconds: float, device: torch.device, *, bf16: bool
) -> dict[str, float]:
    """``model_tflops_per_s`` of a step over these micro-batches' attention
    masks ([B, T] each, one right-padded sample per row), and ``mfu`` when
    the device's peak is known."""
    lengths = [int(n) for mask in attention_masks for n in mask.sum(-1).tolist()]
    return sequence_throughput_metrics(model, lengths, seconds, device, bf16=bf16)


def sequence_throughput_metrics(
    model: torch.nn.Module, sample_lengths: Sequence[int], seconds: float, device: torch.device, *, bf16: bool
) -> dict[str, float]:
    """As ``throughput_metrics``, from each sample's own length: what a packed
    row needs, as its samples attend within themselves (S is the sample's
    length, never the row's)."""
    config = model.config
    flops = step_flops(matmul_parameters(model), config.num_hidden_layers, config.hidden_size, sample_lengths)
    tflops = flops / max(seconds, 1e-9) / 1e12
    out = {"model_tflops_per_s": tflops}
    peak = peak_bf16_tflops(device) if bf16 else None
    if peak is not None:
        out["mfu"] = tflops / peak
    return out


__all__ = [
    "PEAK_BF16_TFLOPS",
    "matmul_parameters",
    "peak_bf16_tflops",
    "peak_for_device_name",
    "sequence_throughput_metrics",
    "step_flops",
    "throughput_metrics",
]
