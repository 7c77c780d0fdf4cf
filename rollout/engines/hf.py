"""The ``hf`` engine: transformers ``generate`` with sampling, on CPU or one GPU.

For machines without vLLM and for small demos and tests. Concurrent
``generate`` calls are coalesced: a request waits for the running batch (or,
when the engine was idle, ``batch_wait_ms``), then one ``generate`` call runs
over the sequences of every waiting request with the same sampling parameters
(temperature, top-p, top-k, max_tokens, stop), prompts left-padded under an
attention mask, and the rows are split back per request. A batch holds at most
``max_batch`` sequences; a larger group is split into several calls. A request
with a ``seed`` always runs alone, after ``torch.manual_seed(seed)``, so it is
reproducible whatever else is in flight. One batch runs at a time, in a worker
thread, so the event loop stays responsive; a weight load takes the same lock,
so a batch never straddles two versions.

Behaviour log-probs are read step by step by a logits processor placed
*after* temperature, then top-k, then top-p (transformers' own warpers, with
the same tie and cut-off rules as vLLM, handed to ``generate`` together with
it: hf_logprobs.py), so they are those of the distribution that is sampled;
only one step's [B, V] scores are held, never ``output_scores``' [B, T, V].
Temperature 0 is greedy, and its log-probs are those of the unscaled
distribution (as vLLM reports them). The
model's own ``generation_config`` defaults (repetition penalty and the like)
are dropped at load, so the sampling distribution is exactly the one the
learner recomputes. Left padding does not change them: ``generate`` derives
position ids from the attention mask.

Tensors in memory (the collective transport): ``load_state_dict`` runs the
checks of ``load_weights`` on them (names, shapes, dtypes, a tied head) and
copies them in under the same lock; no file is written.

LoRA: ``load_adapter`` applies a peft adapter (checked by rollout/adapter.py)
on top of the base model: the first one wraps the model in a ``PeftModel``,
later ones are loaded beside it under their version's name, activated, and
the previous one deleted, all under the batch lock. Full weights after an
adapter unwrap the model first.

Not covered: continuous batching (a request joins at a batch boundary only;
use ``vllm``), multi-GPU.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass, field
from typing import Any

import anyio

from rlvr.protocol.tasks import ChatMessage, SamplingParams
from rlvr.protocol.weights import WeightFile
from rlvr.rollout.engines.base import (
    Generation,
    GroupResult,
    HFEngineConfig,
    PromptTooLongError,
    cut_at_stop,
    eos_token_ids,
    render_prompt_ids,
)
from rlvr.rollout.adapter import check_adapter
from rlvr.rollout.weights import (
    check_weight_index,
    index_of_state,
    load_state_dict,
    read_weight_index,
    verify_weight_files,
)


@dataclass(eq=False)
class _Request:
    """One ``generate`` call waiting for, or served by, a batch."""

    prompt_ids: list[int]
    n: int
    sampling: SamplingParams
    key: object  # requests with equal keys may share a batch
    arrived_idle: bool  # no batch was running when it arrived: wait batch_wait_ms for company
    done: anyio.Event = field(default_factory=anyio.Event)
    generations: list[Generation] = field(default_factory=list)
    version: int = 0
    error: BaseException | None = None


def _batch_key(sampling: SamplingParams) -> object:
    """Sampling parameters that must match for two requests to share a batch;
    a seeded request gets a key of its own."""
    if sampling.seed is not None:
        return object()
    return (sampling.temperature, sampling.top_p, sampling.top_k, sampling.max_tokens, sampling.stop)


class HFEngine:
    def __init__(self, cfg: HFEngineConfig) -> None:
        self.cfg = cfg
        self.weights_version = 0
        self.generate_calls = 0  # transformers generate calls so far (batching is visible in tests and benches)
        self._lock = anyio.Lock()
        self._pending: list[_Request] = []
        self._running = False
        self._model: Any = None
        self._tok: Any = None
        self._eos: list[int] = []
        self._tied = False
        self._base_shapes: dict[str, tuple[int, ...]] = {}  # the base model's tensors (adapters are checked against it)
        self._adapter: str | None = None  # peft name of the active adapter, None: plain weights

    async def start(self) -> None:
        await anyio.to_thread.run_sync(self._start)

    def _start(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        dtype = torch.float32 if self.cfg.dtype == "auto" else getattr(torch, self.cfg.dtype)
        self._tok = AutoTokenizer.from_pretrained(self.cfg.model)
        model = AutoModelForCausalLM.from_pretrained(self.cfg.model, dtype=dtype).to(self.cfg.device)
        model.eval()
        self._eos = eos_token_ids(self._tok, self.cfg.model)
        pad = self._tok.pad_token_id if self._tok.pad_token_id is not None else self._eos[0]
        model.generation_config = GenerationConfig(eos_token_id=self._eos, pad_token_id=pad)
        self._tied = bool(getattr(model.config, "tie_word_embeddings", False))
        self._base_shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        self._model = model

    @property
    def dtype(self) -> str:
        """The dtype the model runs in ("auto" loads float32, whatever the checkpoint's torch_dtype)."""
        return str(self._model.dtype).removeprefix("torch.")

    async def generate(
        self, prompt: str | list[ChatMessage], n: int, sampling: SamplingParams
    ) -> GroupResult:
        return await self.generate_ids(render_prompt_ids(self._tok, prompt), n, sampling)

    def chat_codec(self):
        from rlvr.rollout.transcript import HFChatCodec

        return HFChatCodec(self._tok)

    async def generate_ids(self, prompt_ids: list[int], n: int, sampling: SamplingParams) -> GroupResult:
        prompt_ids = list(prompt_ids)
        if len(prompt_ids) > self.cfg.max_prompt_tokens:
            raise PromptTooLongError(len(prompt_ids), self.cfg.max_prompt_tokens)
        req = _Request(prompt_ids, n, sampling, _batch_key(sampling), arrived_idle=not self._running)
        self._pending.append(req)
        try:
            while not req.done.is_set():
                async with self._lock:
                    if not req.done.is_set():
                        await self._serve(req)
        finally:
            if req in self._pending:  # cancelled before any batch took it
                self._pending.remove(req)
        if req.error is not None:
            raise req.error
        return GroupResult(
            prompt_ids=prompt_ids,
            generations=req.generations,
            weights_version_min=req.version,
            weights_version_max=req.version,
        )

    async def _serve(self, req: _Request) -> None:
        """Run one batch that holds ``req`` and whichever pending requests share
        its key and fit in ``max_batch``. The caller holds the lock."""
        wait = self.cfg.batch_wait_ms / 1000.0
        alone = req.sampling.seed is not None  # no one can join it: do not wait
        if req.arrived_idle and not alone and wait > 0 and self._rows_like(req) < self.cfg.max_batch:
            await anyio.sleep(wait)
        batch = self._take_batch(req)
        version = self.weights_version
        self._running = True
        try:
            # Shielded: the batch serves other callers, whose results must not be lost.
            with anyio.CancelScope(shield=True):
                results = await anyio.to_thread.run_sync(self._generate_batch, batch)
        except Exception as e:
            for r in batch:
                r.error = e
                r.done.set()
            return
        finally:
            self._running = False
        for r, gens in zip(batch, results, strict=True):
            r.generations, r.version = gens, version
            r.done.set()

    def _rows_like(self, req: _Request) -> int:
        return sum(r.n for r in self._pending if r.key == req.key)

    def _take_batch(self, req: _Request) -> list[_Request]:
        """``req`` first, then pending requests with its key in arrival order
        while the rows fit in ``max_batch``; the taken ones leave the queue."""
        batch, rows = [req], req.n
        for r in self._pending:
            if r is not req and r.key == req.key and rows + r.n <= self.cfg.max_batch:
                batch.append(r)
                rows += r.n
        for r in batch:
            self._pending.remove(r)
        return batch

    def _generate_batch(self, batch: list[_Request]) -> list[list[Generation]]:
        """Generations per request; rows are cut into ``max_batch`` chunks."""
        import torch

        sampling = batch[0].sampling
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        rows = [r.prompt_ids for r in batch for _ in range(r.n)]
        flat: list[Generation] = []
        for start in range(0, len(rows), self.cfg.max_batch):
            flat.extend(self._generate_chunk(rows[start : start + self.cfg.max_batch], sampling))
        out, at = [], 0
        for r in batch:
            out.append(flat[at : at + r.n])
            at += r.n
        return out

    def _generate_chunk(self, rows: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        import torch
        from transformers import GenerationConfig

        from rlvr.rollout.engines.hf_logprobs import SampledLogprobs, sampling_processors

        pad = self._model.generation_config.pad_token_id
        # generate's own warpers stay off (top_k 0: its default is 50): they are
        # handed in below, ahead of the log-prob recorder (see hf_logprobs.py).
        gen_cfg = GenerationConfig(
            do_sample=sampling.temperature != 0.0,
            top_k=0,
            max_new_tokens=sampling.max_tokens,
            eos_token_id=self._eos,
            pad_token_id=pad,
            stop_strings=list(sampling.stop) or None,
        )
        recorder = SampledLogprobs()
        processors = sampling_processors(sampling.temperature, sampling.top_k, sampling.top_p, recorder)
        width = max(len(p) for p in rows)
        x = torch.tensor([[pad] * (width - len(p)) + p for p in rows], device=self.cfg.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows], device=self.cfg.device)
        self.generate_calls += 1
        with torch.inference_mode():
            sequences = self._model.generate(
                input_ids=x,
                attention_mask=mask,
                generation_config=gen_cfg,
                logits_processor=processors,
                tokenizer=self._tok if sampling.stop else None,
            )
            new = sequences[:, width:]  # [B, T]
            lp = recorder.logprobs(new)  # [B, T]
        return [self._finish(new[i].tolist(), lp[i].tolist(), sampling) for i in range(len(rows))]

    async def score(self, rows: list[tuple[list[int], list[int]]]) -> tuple[list[list[float]], int]:
        """log pi(target_j | prefix, target_<j) of each (prefix, target) row at temperature 1,
        under the current weights (none load meanwhile), and their version."""
        async with self._lock:
            version = self.weights_version
            return await anyio.to_thread.run_sync(self._score_rows, rows), version

    def _score_rows(self, rows: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        import torch

        pad = self._model.generation_config.pad_token_id
        out: list[list[float]] = []
        for start in range(0, len(rows), self.cfg.max_batch):
            chunk = rows[start : start + self.cfg.max_batch]
            seqs = [list(p) + list(t) for p, t in chunk]
            width = max(len(q) for q in seqs)
            x = torch.tensor([q + [pad] * (width - len(q)) for q in seqs], device=self.cfg.device)
            mask = torch.tensor([[1] * len(q) + [0] * (width - len(q)) for q in seqs], device=self.cfg.device)
            with torch.inference_mode():
                logp = torch.log_softmax(self._model(input_ids=x, attention_mask=mask).logits.float(), -1)  # [B, W, V]
            for r, (p, t) in enumerate(chunk):
                at = torch.arange(len(p) - 1, len(p) + len(t) - 1, device=logp.device)  # positions predicting t
                out.append(logp[r, at, torch.tensor(t, device=logp.device)].tolist())
        return out

    def _finish(self, ids: list[int], logprobs: list[float], sampling: SamplingParams) -> Generation:
        finish = "length"
        for k, t in enumerate(ids):
            if t in self._eos:
                ids, logprobs, finish = ids[: k + 1], logprobs[: k + 1], "stop"
                break
        cut = cut_at_stop(self._tok, ids, sampling.stop)
        if cut is not None:
            keep, text = cut
            return Generation(ids=ids[:keep], logprobs=logprobs[:keep], text=text, finish_reason="stop")
        text = self._tok.decode(ids, skip_special_tokens=True)
        return Generation(ids=ids, logprobs=logprobs, text=text, finish_reason=finish)

    async def load_weights(
        self, directory: pathlib.Path, version: int, files: list[WeightFile] | None = None
    ) -> None:
        directory = pathlib.Path(directory)
        async with self._lock:
            await anyio.to_thread.run_sync(self._load, directory, files)
            self.weights_version = version

    def _load(self, directory: pathlib.Path, files: list[WeightFile] | None) -> None:
        if files is not None:
            verify_weight_files(directory, files)
        check_weight_index(read_weight_index(directory), dict(self._base_shapes), tied=self._tied)
        self._copy_in(load_state_dict(directory))

    async def load_state_dict(self, state: dict[str, Any], version: int) -> None:
        """Load a full state dict already in memory (the collective transport), with the
        checks of ``load_weights``: names, shapes, float dtypes, the head of a tied model."""
        async with self._lock:
            await anyio.to_thread.run_sync(self._load_tensors, state)
            self.weights_version = version

    def _load_tensors(self, state: dict[str, Any]) -> None:
        check_weight_index(index_of_state(state), dict(self._base_shapes), tied=self._tied)
        self._copy_in(state)

    def _copy_in(self, state: dict[str, Any]) -> None:
        import torch

        if self._adapter is not None:  # full weights replace base and adapter alike
            self._model = self._model.unload()
            self._adapter = None
        # Validated above: from here on nothing can leave the model half-loaded.
        with torch.no_grad():
            params = self._model.state_dict()
            for name, tensor in state.items():
                if name in params:
                    params[name].copy_(tensor.to(params[name].dtype))

    async def load_adapter(
        self, directory: pathlib.Path, version: int, files: list[WeightFile] | None = None
    ) -> None:
        """Apply the LoRA adapter in ``directory`` (peft's files) on the base
        model for the following batches; the old adapter stays on a reject."""
        directory = pathlib.Path(directory)
        async with self._lock:
            await anyio.to_thread.run_sync(self._load_adapter, directory, version, files)
            self.weights_version = version

    def _load_adapter(self, directory: pathlib.Path, version: int, files: list[WeightFile] | None) -> None:
        from peft import PeftModel

        if files is not None:
            verify_weight_files(directory, files)
        check_adapter(directory, self._base_shapes)
        name = f"v{version}"
        if self._adapter is None:
            self._model = PeftModel.from_pretrained(self._model, directory, adapter_name=name).eval()
        else:
            self._model.load_adapter(directory, adapter_name=name)
            self._model.set_adapter(name)
            self._model.delete_adapter(self._adapter)
        self._adapter = name

    async def close(self) -> None:
        self._model = None


__all__ = ["HFEngine"]
