"""Bytes per GPU for each role of a run, from the model's shape and the config: a plan, not a measurement.

Learner (one rank; ``ranks`` data-parallel ranks share the ZeRO shards). P parameters of which T
train (T = P, or the LoRA adapters' count); w = 2 bytes (bf16) or 4 (fp32); n ranks; each term
as DeepSpeed 0.19 and torch's AdamW hold it (counted in a tensor census, bench/plan_vs_measured.py):

- held throughout: the weights (wP; ZeRO-3: wP/n), AdamW's two fp32 moments (8T; ZeRO: 8T/n),
  the fp32 master weights (bf16 ZeRO-0: 4T; ZeRO-1/2/3: a 4T/n partition of their own, even when
  the weights are fp32), ZeRO-3's gradient partition and bucket;
- at the forward's end (the backward's start): the activations of one micro-batch of
  ``micro_batch_tokens`` tokens, about 8h + 3kv + 4i values per token and layer (h hidden, kv the
  key/value width, i the MLP width; with gradient checkpointing each layer's input and one layer
  rebuilt, counted twice: its values and their gradients); the chunked log-prob buffer
  (``learner/train/token_logprobs.py``: three fp32 [chunk, V] buffers, chunk = min(1,024, tokens));
  the output head's gradient (V x h, ZeRO-1/2: twice, with its copy in the bucket); ZeRO-3's
  gathered weights, until the backward's end (up to ``stage3_max_live_parameters``: a smaller
  model is gathered whole);
- at the backward's end: every gradient (ZeRO-0 and ZeRO-1: wT; ZeRO-2: the rank's wT/n) and
  the buffer they are reduced through: under ZeRO-1/2 a bucket of ``reduce_bucket_size`` elements
  of w bytes (a GPU allocates all of it; on CPU only the pages written count), under ZeRO-0 the
  all-reduce's flat copy of the gradients (on one rank too);
- at the optimizer step: the gradients in fp32 (bf16 ZeRO-0: a 4T copy; ZeRO: the 4T/n partition
  handed to AdamW) and AdamW's temporaries (on a GPU, foreach: one fp32 copy of what it updates;
  on CPU, one tensor at a time: two of its largest tensor, the flat partition under ZeRO).

The peak is the largest of the three moments: the activations are gone before the step's copies
exist. ``offload_optimizer`` moves the master weights, the moments, the fp32 gradients and the
step to CPU memory. Also counted: the reference model (``loss.kl_coef > 0``: its weights in the
compute dtype, on every rank) and a fixed allowance for the CUDA context, NCCL and the caching
allocator's slack (``GPU_OVERHEAD``). The old full-logits log-prob path (about six fp32
[tokens, V] copies, bench/results/learner_memory.md) is kept as ``full_logits`` for comparing with
figures measured before the chunking.

Held samples (host memory, never on a GPU): every sample the learner has received and not yet
settled (custody, group assembly, the step's batch) is decoded Python objects, token ids and
log-probs as lists. At most (tasks in flight + ``groups_per_step``) x ``group_size`` samples are
held: a task stays in flight until its complete group is taken into a batch (learner/data/feeder.py),
and ``learn.oversample`` raises the tasks in flight up to ``MAX_OVERSAMPLE`` times. Each is counted
at prompt + ``max_tokens`` tokens (an upper bound: the plan does not know the mean length) at
``HELD_BYTES_PER_TOKEN`` and ``HELD_BYTES_PER_SAMPLE``, measured on a dry learner holding
DeepSeek-R1's step (bench/held_sample_memory.py: 93 bytes a token for 8,192 samples of 35.8M
tokens, 111 for the first 1,024; bench/results/held_step_memory.md).

Rollout (one vLLM replica, per GPU of its tensor-parallel group): weights, vLLM's non-KV reserve
(activation peak of the sampler's logits, CUDA graphs unless ``enforce_eager``), and the KV cache
that is left of ``gpu_memory_utilization`` x the GPU; 2 x layers x kv width x dtype bytes per
token. Sequences of ``max_model_len`` that fit = KV bytes / (bytes per token x max_model_len).

Not counted: fragmentation beyond the allowance; attention's score matrix (sdpa's kernels keep none,
on a GPU and, since torch 2.x's flash kernel for CPU, on CPU too); a critic (this config format has
none yet); offload and LoRA were not measured (their terms follow DeepSpeed's code).
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
# DeepSpeed's default zero_optimization.reduce_bucket_size (elements), and the bucket of its ZeRO-0
# all-reduce (MEMORY_OPT_ALLREDUCE_SIZE); the learner sets neither.
REDUCE_BUCKET = 500_000_000
MAX_LIVE_PARAMETERS = 1_000_000_000  # its default zero_optimization.stage3_max_live_parameters
# What the learner process holds per sample it has received (bench/results/held_step_memory.md: 93 bytes
# a token over a whole R1 step, 111 over its first eighth; the per-sample term covers the rest of the
# first eighth's and the structs, spans and custody entries).
HELD_BYTES_PER_TOKEN = 100
HELD_BYTES_PER_SAMPLE = 16 * 1024
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2}


# The three moments of a training step at which the learner's memory peaks: the forward's end (the
# backward's start: every activation, the log-prob chunk being rebuilt, the output head's gradient),
# the backward's end (every gradient, DeepSpeed's bucket) and the optimizer step (the fp32 gradient
# copies, AdamW's temporaries; the activations are gone). A part says at which of them it is alive.
MOMENTS = ("forward", "backward", "step")
FORWARD, BACKWARD, STEP = (("forward",), ("backward",), ("step",))


class Part(msgspec.Struct, frozen=True):
    name: str
    bytes: int
    where: str = "gpu"  # "gpu" or "cpu" (offloaded)
    alive: tuple[str, ...] = MOMENTS  # the moments at which it is alive; all of them: held throughout


def at_moments(parts: list[Part], where: str) -> dict[str, int]:
    """Bytes ``parts`` on ``where`` hold at each moment of a step."""
    return {m: sum(p.bytes for p in parts if p.where == where and m in p.alive) for m in MOMENTS}


def peak(parts: list[Part], where: str) -> int:
    """The most ``parts`` on ``where`` hold at once: the largest of the three moments."""
    return max(at_moments(parts, where).values())


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
        return peak(self.parts, "gpu")

    @property
    def cpu_bytes(self) -> int:
        return peak(self.parts, "cpu")

    @property
    def host_bytes(self) -> int:
        """Host memory of parts that never go to a GPU (the learner's held samples, on a GPU plan)."""
        return peak(self.parts, "host")

    @property
    def shortfall(self) -> int:
        return 0 if self.budget is None else max(0, self.gpu_bytes - self.budget)


def trainable(shape: ModelShape, s: LearnerSettings) -> int:
    return lora_params(shape, s.lora_rank, s.lora_targets) if s.lora_rank else shape.params


def model_states(shape: ModelShape, s: LearnerSettings, ranks: int, on_gpu: bool = True) -> list[Part]:
    """Weights, gradients, optimizer states, DeepSpeed's buffers and AdamW's temporaries on one of
    ``ranks`` ranks, as DeepSpeed 0.19 and torch's AdamW hold them (docs/plan.md says each term)."""
    P, T, n = shape.params, trainable(shape, s), max(1, ranks)
    w = 2 if s.bf16 else 4
    bits = "16-bit" if s.bf16 else "fp32"
    off = "cpu" if s.offload_optimizer and s.zero_stage >= 1 else "gpu"
    shard = T if s.zero_stage == 0 else -(-T // n)  # what this rank's optimizer updates
    # torch's AdamW on a GPU (foreach) holds one fp32 temporary of what it updates (sqrt of the second
    # moment); on CPU (one tensor at a time) two of its largest tensor: the flat partition under ZeRO.
    temps = 4 * shard if on_gpu and off == "gpu" else 2 * 4 * (
        min(T, shape.largest_layer_params) if s.zero_stage == 0 else shard)
    optimizer = [Part("AdamW moments (fp32)", 8 * shard, off), Part("AdamW temporaries (fp32)", temps, off, STEP)]
    if T == P:  # the backward's first gradient, beside every activation: the output head's (ZeRO-1/2: and its bucket copy)
        head = shape.vocab * shape.hidden * w * (2 if s.zero_stage in (1, 2) else 1)
        optimizer.append(Part("gradients: the output head's, at the backward's start", head, alive=FORWARD))
    if s.zero_stage == 0:  # torch's AdamW, or DeepSpeed's unfused mixed-precision wrapper around it
        # DeepSpeed's data-parallel all-reduce flattens the gradients, REDUCE_BUCKET elements at a time,
        # between the backward and the step (on one rank too).
        parts = [Part(f"weights ({bits})", P * w), Part(f"gradients ({bits})", T * w, alive=("backward", "step")),
                 Part(f"gradients: all-reduce's flat copy ({bits})", min(T, REDUCE_BUCKET) * w, alive=BACKWARD)]
        if s.bf16:
            parts += [Part("master weights (fp32)", 4 * T), Part("gradients: fp32 copy at the step", 4 * T, alive=STEP)]
        return parts + optimizer
    # ZeRO-1/2/3 keep an fp32 master partition even when the weights are fp32, reduce gradients
    # through a bucket of REDUCE_BUCKET elements (a GPU allocates it whole; on CPU only the pages
    # written count, one per trained element) and hand AdamW an fp32 copy of the rank's partition.
    bucket = (REDUCE_BUCKET if on_gpu else min(T, REDUCE_BUCKET)) * w
    if s.zero_stage == 3:
        # Gathered weights stay live up to stage3_max_live_parameters (a model below it is gathered
        # whole between its forward and backward); the largest module at the least.
        live = min(P, max(MAX_LIVE_PARAMETERS, shape.largest_layer_params))
        parts = [Part(f"weights ({bits}, ZeRO-3 partition)", P * w // n),
                 Part("weights gathered (ZeRO-3, up to stage3_max_live_parameters)", live * w,
                      alive=("forward", "backward")),
                 Part(f"gradients ({bits}, partition)", shard * w),
                 Part(f"gradient bucket ({bits}, reduce_bucket_size)", bucket)]
    else:  # ZeRO-1 keeps every parameter's gradient until the step, ZeRO-2 the rank's partition only
        parts = [Part(f"weights ({bits})", P * w),
                 Part(f"gradients ({bits})" if s.zero_stage == 1 else f"gradients ({bits}, partition)",
                      T * w if s.zero_stage == 1 else shard * w, alive=BACKWARD),
                 Part(f"gradient bucket ({bits}, reduce_bucket_size)", bucket, alive=BACKWARD)]
    return parts + [Part("master weights (fp32 partition)", 4 * shard, off),
                    Part("gradients: fp32 partition at the step", 4 * shard, off, STEP), *optimizer]


def activations(shape: ModelShape, s: LearnerSettings) -> list[Part]:
    """One micro-batch's activations and the log-prob buffer."""
    a = 2 if s.bf16 else 4
    t, h, i, kv, L = s.micro_batch_tokens, shape.hidden, shape.intermediate, shape.kv_dim, shape.layers
    layer = t * (8 * h + 3 * kv + 4 * i) * a
    if s.gradient_checkpointing:
        acts = [Part("activations: layer inputs (checkpointed)", L * t * h * a, alive=FORWARD),
                Part("activations: one layer rebuilt in backward", 2 * layer, alive=FORWARD)]
    else:
        acts = [Part("activations (no checkpointing)", L * layer, alive=FORWARD)]
    if s.full_logits:
        acts.append(Part("log-probs: full fp32 logits (old path)", int(FULL_LOGITS_COPIES * t * shape.vocab * 4),
                         alive=FORWARD))
    else:
        chunk = min(LOGPROB_CHUNK, t)
        acts.append(Part(f"log-probs: chunks of {chunk} x vocab (fp32)", int(CHUNK_COPIES * chunk * shape.vocab * 4),
                         alive=FORWARD))
    return acts


class Held(msgspec.Struct, frozen=True):
    """The samples the learner may hold at once, each counted at ``tokens`` (prompt + max_tokens)."""

    samples: int
    tokens: int

    @property
    def bytes(self) -> int:
        return self.samples * (HELD_BYTES_PER_SAMPLE + self.tokens * HELD_BYTES_PER_TOKEN)


def held_part(held: Held, on_gpu: bool) -> Part:
    """The held samples: host memory beside a GPU plan, the process's own memory on a CPU plan."""
    return Part(f"held samples: up to {held.samples:,} of <= {held.tokens:,} tokens (custody, groups, the batch)",
                held.bytes, "host" if on_gpu else "gpu")


def learner_plan(shape: ModelShape, s: LearnerSettings, *, ranks: int = 1, budget: int | None = None,
                 on_gpu: bool = True, held: Held | None = None) -> RolePlan:
    parts = model_states(shape, s, ranks, on_gpu) + activations(shape, s)
    if held is not None:
        parts.append(held_part(held, on_gpu))
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


__all__ = ["GiB", "Held", "LearnerSettings", "Part", "RolePlan", "RolloutSettings", "activations", "gib",
           "kv_bytes_per_token", "learner_plan", "model_states", "rollout_plan", "trainable"]
