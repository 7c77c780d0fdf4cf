"""The generation-engine interface the rollout actor calls, and its typed configs.

An engine turns one prompt into a group of ``n`` completions, each with the
token ids, the text, the behaviour log-prob of every sampled token and a
finish reason, and it swaps its weights in place. The log-probs are those of
the *processed* sampling distribution (after temperature, top-k and top-p),
which is what the learner recomputes for importance sampling.

Backends: ``vllm`` (AsyncLLM, continuous batching), ``hf`` (transformers
``generate``, CPU demos and tests) and ``trivial`` (arithmetic answers with a
set accuracy, no torch: the walking skeleton). This module imports no torch;
``make_engine`` imports the chosen backend lazily.

Not covered here: NATS, retries, weight download (rollout/actor.py) and the
sha256 check of a blob (rollout/weights.py).
"""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, runtime_checkable

import msgspec
from msgspec import Meta

from rlvr.protocol.tasks import ChatMessage, SamplingParams
from rlvr.rollout.weights import WeightsRejectedError

if TYPE_CHECKING:
    from rlvr.protocol.weights import WeightFile

Dtype = Literal["auto", "float32", "bfloat16", "float16"]
# The LoRA ranks vLLM (0.32) can serve.
LoraRank = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]


class Generation(msgspec.Struct, frozen=True):
    """One completion. ``ids`` include the end-of-sequence token when the
    model emitted one (the learner must learn to stop); ``text`` does not."""

    ids: list[int]
    logprobs: list[float]  # logprobs[i] = log π(ids[i] | prompt, ids[:i]), processed distribution
    text: str
    finish_reason: Literal["stop", "length", "abort"]


class GroupResult(msgspec.Struct, frozen=True):
    """The ``n`` completions of one prompt, and the policy versions they saw.

    ``weights_version_min < weights_version_max`` when weights were reloaded
    while the group was being generated.
    """

    prompt_ids: list[int]
    generations: list[Generation]
    weights_version_min: int
    weights_version_max: int


class PromptTooLongError(ValueError):
    """The rendered prompt has more tokens than the engine's ``max_prompt_tokens``."""

    def __init__(self, n_tokens: int, limit: int) -> None:
        super().__init__(f"prompt has {n_tokens} tokens > limit {limit}")
        self.n_tokens = n_tokens
        self.limit = limit


class EngineDeadError(RuntimeError):
    """The engine cannot serve any more; the replica should exit non-zero."""


@runtime_checkable
class Engine(Protocol):
    weights_version: int  # the ``version`` of the last successful load_weights, 0 at start

    async def start(self) -> None: ...

    async def generate(
        self, prompt: str | list[ChatMessage], n: int, sampling: SamplingParams
    ) -> GroupResult: ...

    async def generate_ids(self, prompt_ids: list[int], n: int, sampling: SamplingParams) -> GroupResult:
        """``generate`` from token ids (a multi-turn episode's next turn: the
        conversation so far, exactly as its tokens stand)."""
        ...

    def chat_codec(self) -> Any:
        """How this engine's tokenizer renders and encodes chat (``rlvr.rollout.transcript.ChatCodec``)."""
        ...

    async def score(self, rows: list[tuple[list[int], list[int]]]) -> tuple[list[list[float]], int]:
        """For each (prefix, target) row, log pi(target_j | prefix, target_<j) at temperature 1
        under the current weights, and their version (RLPR: ``rlvr.rollout.rlpr``)."""
        ...

    async def load_weights(
        self, directory: pathlib.Path, version: int, files: list[WeightFile] | None = None
    ) -> None:
        """Load a full state dict from ``directory``; with ``files``, check their
        sha256 first. Raises ``WeightsRejectedError`` and keeps the old weights
        on a bad or partial blob."""
        ...

    async def close(self) -> None: ...


class HFEngineConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="hf", tag_field="kind"):
    """transformers' ``generate`` (CPU demos and tests). The model folder's generation_config.json gives
    its end-of-sequence ids only: its sampling defaults (temperature, top_p, top_k, repetition_penalty...)
    are dropped, so a repetition_penalty there has no effect. The task's sampling ([learn.sampling]) is
    the whole distribution, the one the learner recomputes."""

    # local folder with config.json, tokenizer and safetensors; "@prepared": the model [learn.prepare] builds
    # and warms up when `up` starts (the built-in example's).
    model: str
    # torch dtype the weights are loaded in ("auto" = float32, whatever the checkpoint's torch_dtype).
    dtype: Dtype = "float32"
    # A longer prompt (after the chat template) is not generated: the task gets n empty "abort" completions.
    max_prompt_tokens: Annotated[int, Meta(gt=0)] = 1024
    # torch device the model runs on ("cpu", "cuda", "cuda:1").
    device: str = "cpu"
    # Sequences per transformers.generate call; concurrent groups with the same sampling
    # parameters share a call up to this many rows, a larger group is split.
    max_batch: Annotated[int, Meta(gt=0)] = 64
    # How long a request that finds the engine idle waits for others to share its batch,
    # in ms (requests that arrive while a batch runs join the next one without waiting).
    batch_wait_ms: Annotated[float, Meta(ge=0.0, le=1000.0)] = 2.0


class VLLMEngineConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="vllm", tag_field="kind"):
    """vLLM's AsyncLLM. As with hf, the model folder's generation_config.json gives its end-of-sequence
    ids only; its sampling defaults never apply (a repetition_penalty there has no effect). ``extra`` is
    applied after the engine's own arguments, so it can replace what the log-probs rest on
    (``logprobs_mode``, ``dtype``): ``rlvr-actor doctor`` names such a key."""

    # Local folder with config.json, tokenizer and safetensors (the initial policy); "@prepared": the model
    # [learn.prepare] builds and warms up when `up` starts (the built-in example's).
    model: str
    # dtype of weights and activations; "auto" is vLLM's rule (0.32): the checkpoint's dtype, a float32
    # one in the platform's first 16-bit type (bfloat16 on x86 CPUs and Ampere or later GPUs, float16
    # on older GPUs). `rlvr-actor doctor` reports the dtype it resolved.
    dtype: Dtype = "auto"
    # Longest prompt + completion, in tokens; a completion stops ("length") when it reaches it.
    max_model_len: Annotated[int, Meta(gt=0)] = 4096
    # A longer prompt (after the chat template) is not generated: the task gets n empty "abort"
    # completions. Must be below max_model_len.
    max_prompt_tokens: Annotated[int, Meta(gt=0)] = 1024
    # GPUs one replica shards the model across (tensor parallelism).
    tensor_parallel_size: Annotated[int, Meta(gt=0)] = 1
    # Fraction of GPU memory vLLM may take for weights and KV cache; lower it when the GPU is shared.
    gpu_memory_utilization: Annotated[float, Meta(gt=0.0, le=1.0)] = 0.9
    # Required on CPU (or env VLLM_CPU_KVCACHE_SPACE in GiB); on GPU None lets
    # vLLM size the cache from gpu_memory_utilization.
    kv_cache_memory_bytes: Annotated[int, Meta(gt=0)] | None = None
    # No CUDA graphs: faster start and less memory, slower decoding. Required on CPU;
    # set false on a GPU for throughput.
    enforce_eager: bool = True
    # Sequences vLLM decodes together (a group of n counts n); more wait for a free slot.
    max_num_seqs: Annotated[int, Meta(gt=0)] = 256
    # vLLM's global seed; a task's sampling.seed, when set, takes precedence for its group.
    seed: int = 0
    # LoRA runs ([learn.engine.lora]): the largest adapter rank this replica serves; set, vLLM
    # starts with enable_lora and applies each new policy as an adapter. None: full weights only.
    max_lora_rank: LoraRank | None = None
    # Run the model worker inside vLLM's engine-core process (the "uni" executor) rather
    # than in a worker process of its own. With its own worker process, vLLM on CPU has
    # the core and the worker spin on a shared-memory queue: about a core of CPU for
    # nothing while generating, and 0.2 cores while idle. In process, the same tokens/s
    # take 40% less CPU (docs/benchmarks.md, "A real pretrained model learns"). Ignored when
    # tensor_parallel_size > 1.
    worker_in_engine_process: bool = True
    extra: dict[str, Any] = {}  # passed through to vllm AsyncEngineArgs as keyword arguments

    def __post_init__(self) -> None:
        if self.max_prompt_tokens >= self.max_model_len:
            raise ValueError(
                f"max_prompt_tokens ({self.max_prompt_tokens}) must be < max_model_len ({self.max_model_len})"
            )


class TrivialLengthsConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Completions as long as a reasoning model's, for load tests of the bus (bench/scale).

    Each completion's length is drawn from a lognormal (median ``median_tokens``, log-space spread
    ``sigma``) and cut at the task's sampling.max_tokens (finish "length"), as a real engine cuts
    it; the defaults give a median of 2,048 and a mean of ~4k tokens before the cut. Its ids are
    drawn from a vocabulary of ``vocab_size`` (so they cost on the wire what real ids cost), its
    text is ~4 characters per token and ends with "#### <answer>" (score it with the exact verifier,
    after = "####"); a cut completion has no answer. Single completions only: an episode's turns
    (``generate_ids``) keep the short answers, whose ids are their utf-8 bytes."""

    # Median completion length, in tokens (issue 46: a reasoning model's median in RL).
    median_tokens: Annotated[int, Meta(ge=1)] = 2048
    # Standard deviation of ln(length); 1.18 puts the mean at twice the median (exp(sigma^2 / 2) = 2).
    sigma: Annotated[float, Meta(ge=0.0, le=4.0)] = 1.18
    # Token ids are drawn from [0, vocab_size): 151,936 is Qwen2.5's vocabulary.
    vocab_size: Annotated[int, Meta(ge=256, le=2**31)] = 151_936
    # Tokens the engine emits per second, all its groups together (a group waits its turn); 0 = at once.
    tokens_per_s: Annotated[float, Meta(ge=0.0)] = 0.0


class TrivialEngineConfig(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="trivial", tag_field="kind"
):
    # Probability that an answer is right; otherwise it is off by 1 to 3. A prompt
    # that does not end in "a+b=" (or - or *) is answered "?".
    accuracy: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.5
    # Seed of the answer draws; with a task's sampling.seed they depend on both seeds and the prompt.
    seed: int = 0
    # Test aid: when set, every generation waits until this file exists, so a
    # bus test can hold a task inside a replica (kill it, stop it) on purpose.
    hold_file: str = ""
    # Load tests: completions of a reasoning model's lengths (bench/scale); unset = the bare answer.
    lengths: TrivialLengthsConfig | None = None


GenerationEngineConfig = HFEngineConfig | VLLMEngineConfig | TrivialEngineConfig


def make_engine(cfg: GenerationEngineConfig) -> Engine:
    """Build (not start) the engine a config names; heavy imports happen here."""
    match cfg:
        case TrivialEngineConfig():
            from rlvr.rollout.engines.trivial import TrivialEngine

            return TrivialEngine(cfg)
        case HFEngineConfig():
            from rlvr.rollout.engines.hf import HFEngine

            return HFEngine(cfg)
        case VLLMEngineConfig():
            from rlvr.rollout.engines.vllm import VLLMEngine

            return VLLMEngine(cfg)
    raise TypeError(f"not an engine config: {cfg!r}")


def render_prompt_ids(tokenizer: Any, prompt: str | list[ChatMessage]) -> list[int]:
    """Token ids of a prompt: chat messages through the tokenizer's chat template
    (with the assistant generation prompt), plain text through the tokenizer."""
    if isinstance(prompt, str):
        return list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    messages = [{"role": m.role, "content": m.content} for m in prompt]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    # The template already writes any BOS/special tokens as text.
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def eos_token_ids(tokenizer: Any, model_dir: str) -> list[int]:
    """End-of-sequence ids: the tokenizer's EOS plus generation_config.json's list."""
    import json

    ids: list[int] = [] if tokenizer.eos_token_id is None else [int(tokenizer.eos_token_id)]
    path = pathlib.Path(model_dir) / "generation_config.json"
    if path.is_file():
        extra = json.loads(path.read_text()).get("eos_token_id")
        for i in extra if isinstance(extra, list) else [extra] if extra is not None else []:
            if int(i) not in ids:
                ids.append(int(i))
    return ids


def cut_at_stop(tokenizer: Any, ids: list[int], stop: tuple[str, ...]) -> tuple[int, str] | None:
    """If the decoded completion contains a stop string, return (number of ids
    to keep, text before the stop string); ids are kept up to and including
    the token that completed the stop string, as vLLM does."""
    if not stop:
        return None
    full = tokenizer.decode(ids, skip_special_tokens=True)
    if not any(s in full for s in stop):
        return None
    for k in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:k], skip_special_tokens=True)
        hits = [text.find(s) for s in stop if s in text]
        if hits:
            return k, text[: min(hits)]
    return None


__all__ = [
    "Engine",
    "GenerationEngineConfig",
    "EngineDeadError",
    "Generation",
    "GroupResult",
    "HFEngineConfig",
    "PromptTooLongError",
    "TrivialEngineConfig",
    "VLLMEngineConfig",
    "WeightsRejectedError",
    "cut_at_stop",
    "eos_token_ids",
    "make_engine",
    "render_prompt_ids",
]
