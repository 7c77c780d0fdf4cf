"""Bytes per GPU for each role of a run, from the model's shape and the config: a plan, not a measurement.

Learner (one rank; ``ranks`` data-parallel ranks share the ZeRO shards):

- model states, P parameters of which T train (T = P, or the LoRA adapters' count):
  bf16: 16-bit weights 2P; 16-bit and fp32 gradients 2T + 4T; fp32 master weights 4T; AdamW's
  two moments 8T (DeepSpeed's "2 + 18" rule). fp32: weights 4P, gradients 4T, moments 8T.
  ZeRO-1 shards the optimizer's share (master + moments) over the ranks, ZeRO-2 the gradients
  too, ZeRO-3 the weights too (plus the largest module gathered whole). ``offload_optimizer``
  moves master weights, moments and fp32 gradients to CPU memory;
- activations of one micro-batch of ``micro_batch_tokens`` tokens: per token and layer the
  tensors a Llama/Qwen2 decoder layer keeps for its backward, about 8h + 3kv + 4i values
  (h hidden, kv the key/value width, i the MLP width), at 2 bytes (bf16) or 4 (fp32). With
  gradient checkpointing each layer keeps only its input (h values), and one layer's full set is
  rebuilt at a time (counted twice: its values and their gradients);
- the chunked log-prob buffer (``learner/train/token_logprobs.py``): about three fp32 [chunk, V]
  buffers at a time, chunk = min(1,024, micro-batch tokens); the old full-logits path held
  about six fp32 [tokens, V] copies (bench/results/learner_memory.md), kept as ``full_logits``
  for comparing with figures measured before the change;
- on CPU only: attention's score matrix. PyTorch's CPU ``scaled_dot_product_attention`` with an
  attention mask (the learner always passes one) takes the math path, which materialises the
  heads x t x t probabilities in the compute dtype: kept per layer for the backward without
  checkpointing, about four such tensors (scores, probabilities and their gradients) for the one
  layer rebuilt with it. This is what the CPU validation showed missing at 1,024 and 2,048 tokens
  (bench/results/plan_vs_measured.md). The GPU kernels (flash, memory-efficient) keep none;
- the reference model (``loss.kl_coef > 0``): its weights in the compute dtype, on every rank;
- a fixed allowance for the CUDA context, NCCL and allocator slack (``GPU_OVERHEAD``).

Rollout (one vLLM replica, per GPU of its tensor-parallel group): weights, vLLM's non-KV reserve
(activation peak of the sampler's logits, CUDA graphs unless ``enforce_eager``), and the KV cache
that is left of ``gpu_memory_utilization`` x the GPU; 2 x layers x kv width x dtype bytes per
token. Sequences of ``max_model_len`` that fit = KV bytes / (bytes per token x max_model_len).

Not counted: fragmentation beyond the allowance, attention's score matrix on a GPU (sdpa's flash
and memory-efficient kernels keep none), a critic (this config format has none yet).
"""

from __future__ import annotations

import msgspec

from rlvr.cli.plan.shapes import ModelShape, lora_params

GiB = 1 << 30
GPU_OVERHEAD = 1 * GiB  # CUDA context + NCCL + allocator slack, per process on a GPU
VLLM_NON_TORCH = 1 * GiB  # vLLM's non-torch allocations and profile margin
CUDA_GRAPHS = GiB // 2  # vLLM's captured graphs when enforce_eager = false
LOGPROB_CHUNK = 1024  # learner/train/token_logprobs.py LOGPROB_CHUNK_TOKENS
FULL_LOGITS_COPIES = 6.1  # fp32 [tokens, V] copies the old path held at its peak (bench/results/learner_memory.md)
CHUNK_COPIES = 3.0  # fp32 [chunk, V] buffers the chunked path holds at a time
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2}


class Part(msgspec.Struct, frozen=True):
    name: str
    bytes: int
    where: str = "gpu"  # "gpu" or "cpu" (offloaded)


class LearnerSettings(msgspec.Struct, frozen=True):
    """The ``[learn.engine]`` settings the learner's memory depends on."""

    bf16: bool
    zero_stage: int
    offload_optimizer: bool
    gradient_checkpointing: bool
    micro_batch_tokens: int
    lora_rank: int = 0  # 0: full parameters
    lora_targets: tuple[str, ...] = ()
    reference: bool = False
    full_logits: bool = False  # the log-prob path before chunking (for old measurements)


class RolePlan(msgspec.Struct, frozen=True):
    role: str
    parts: list[Part]
    budget: int | None  # bytes this role may use on one GPU; None: no GPU stated
    notes: list[str] = []

    @property
    def gpu_bytes(self) -> int:
        return sum(p.bytes for p in self.parts if p.where == "gpu")

    @property
    def cpu_bytes(self) -> int:
        return sum(p.bytes for p in self.parts if p.where == "cpu")

    @property
    def shortfall(self) -> int:
        return 0 if self.budget is None else max(0, self.gpu_bytes - self.budget)


def trainable(shape: ModelShape, s: LearnerSettings) -> int:
    return lora_params(shape, s.lora_rank, s.lora_targets) if s.lora_rank else shape.params


def model_states(shape: ModelShape, s: LearnerSettings, ranks: int) -> list[Part]:
    """Weights, gradients and optimizer states on one of ``ranks`` ranks."""
    P, T, n = shape.params, trainable(shape, s), max(1, ranks)
    w = 2 if s.bf16 else 4
    weights = P * w // n if s.zero_stage == 3 else P * w
    grad16 = 2 * T if s.bf16 else 0  # bf16 gradients beside the fp32 ones
    grad32 = 4 * T
    master = 4 * T if s.bf16 else 0
    moments = 8 * T
    shard_grads = s.zero_stage >= 2
    shard_opt = s.zero_stage >= 1
    off = "cpu" if s.offload_optimizer and s.zero_stage >= 1 else "gpu"
    parts = [Part("weights" + (" (16-bit)" if s.bf16 else " (fp32)"), weights)]
    if s.zero_stage == 3:
        parts.append(Part("largest module gathered (ZeRO-3)", shape.largest_layer_params * w))
    if grad16:
        parts.append(Part("gradients (16-bit)", grad16 // n if shard_grads else grad16))
    parts.append(Part("gradients (fp32)", grad32 // n if shard_grads else grad32, off))
    if master:
        parts.append(Part("master weights (fp32)", master // n if shard_opt else master, off))
    parts.append(Part("AdamW moments (fp32)", moments // n if shard_opt else moments, off))
    return parts


def activations(shape: ModelShape, s: LearnerSettings, on_gpu: bool = True) -> list[Part]:
    """One micro-batch's activations and the log-prob buffer (and, on CPU, attention's scores)."""
    a = 2 if s.bf16 else 4
    t, h, i, kv, L = s.micro_batch_tokens, shape.hidden, shape.intermediate, shape.kv_dim, shape.layers
    layer = t * (8 * h + 3 * kv + 4 * i) * a
    if s.gradient_checkpointing:
        acts = [Part("activations: layer inputs (checkpointed)", L * t * h * a),
                Part("activations: one layer rebuilt in backward", 2 * layer)]
    else:
        acts = [Part("activations (no checkpointing)", L * layer)]
    if not on_gpu:
        scores = shape.heads * t * t * a
        acts.append(Part("attention scores (CPU math path): one rebuilt layer" if s.gradient_checkpointing
                         else "attention scores (CPU math path): every layer",
                         4 * scores if s.gradient_checkpointing else L * scores))
    if s.full_logits:
        acts.append(Part("log-probs: full fp32 logits (old path)", int(FULL_LOGITS_COPIES * t * shape.vocab * 4)))
    else:
        chunk = min(LOGPROB_CHUNK, t)
        acts.append(Part(f"log-probs: chunks of {chunk} x vocab (fp32)", int(CHUNK_COPIES * chunk * shape.vocab * 4)))
    return acts


def learner_plan(shape: ModelShape, s: LearnerSettings, *, ranks: int = 1, budget: int | None = None,
                 on_gpu: bool = True) -> RolePlan:
    parts = model_states(shape, s, ranks) + activations(shape, s, on_gpu)
    if s.reference:
        parts.append(Part("reference model (kl_coef > 0)", shape.params * (2 if s.bf16 else 4)))
    if on_gpu:
        parts.append(Part("CUDA context, NCCL, allocator slack", GPU_OVERHEAD))
    return RolePlan("learn", parts, budget)


class RolloutSettings(msgspec.Struct, frozen=True):
    dtype: str
    max_model_len: int
    max_num_seqs: int
    gpu_memory_utilization: float
    tensor_parallel_size: int = 1
    enforce_eager: bool = True
    kv_cache_memory_bytes: int | None = None
    wanted_seqs: int = 0  # sequences the run asks for at once (tasks in flight x group size)


def kv_bytes_per_token(shape: ModelShape, dtype: str, tp: int = 1) -> int:
    return 2 * shape.layers * shape.kv_dim * DTYPE_BYTES.get(dtype, 2) // max(1, tp)


def rollout_plan(shape: ModelShape, s: RolloutSettings, gpu_bytes: int | None) -> tuple[RolePlan, int | None]:
    """vLLM's memory on one GPU of a replica, and how many sequences of ``max_model_len`` fit at once."""
    tp, b = max(1, s.tensor_parallel_size), DTYPE_BYTES.get(s.dtype, 2)
    weights = shape.params * b // tp
    reserve = VLLM_NON_TORCH + s.max_num_seqs * shape.vocab * 4 * 2 // tp  # sampler logits + probs (fp32)
    if not s.enforce_eager:
        reserve += CUDA_GRAPHS
    parts = [Part("weights", weights), Part("non-KV reserve (sampler, non-torch)", reserve)]
    per_seq = kv_bytes_per_token(shape, s.dtype, tp) * s.max_model_len
    budget = int(gpu_bytes * s.gpu_memory_utilization) if gpu_bytes else None
    if s.kv_cache_memory_bytes:
        kv = s.kv_cache_memory_bytes // tp
    elif budget is not None:
        kv = max(0, budget - weights - reserve)
    else:
        return RolePlan("rollout", parts, None, ["no --gpu-memory: the KV cache is what gpu_memory_utilization leaves"]), None
    parts.append(Part("KV cache", kv))
    fit = kv // per_seq if per_seq else 0
    return RolePlan("rollout", parts, budget), int(fit)


def gib(n: float) -> str:
    """Bytes for a person: GiB, or MiB below a tenth of one."""
    return f"{n / GiB:.2f} GiB" if abs(n) >= GiB / 10 else f"{n / (1 << 20):.1f} MiB"


__all__ = ["GiB", "LearnerSettings", "Part", "RolePlan", "RolloutSettings", "activations", "gib",
           "kv_bytes_per_token", "learner_plan", "model_states", "rollout_plan", "trainable"]
