"""The ``hf`` engine: transformers ``generate`` with sampling, on CPU or one GPU.

For machines without vLLM and for small demos and tests. One group is one
``generate`` call with ``num_return_sequences=n`` (split into ``max_batch``
chunks). Calls are serialised by a lock and run in a worker thread, so the
event loop stays responsive; a weight load takes the same lock, so a group
never straddles two versions.

Behaviour log-probs are read from ``output_scores``, which transformers
returns *after* its logits processors: temperature, then top-k, then top-p,
with the same tie and cut-off rules as vLLM. Temperature 0 is greedy, and its
log-probs are those of the unscaled distribution (as vLLM reports them). The
model's own ``generation_config`` defaults (repetition penalty and the like)
are dropped at load, so the sampling distribution is exactly the one the
learner recomputes.

Not covered: continuous batching across calls (use ``vllm``), multi-GPU.
"""

from __future__ import annotations

import pathlib
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
from rlvr.rollout.weights import (
    check_weight_index,
    load_state_dict,
    read_weight_index,
    verify_weight_files,
)


class HFEngine:
    def __init__(self, cfg: HFEngineConfig) -> None:
        self.cfg = cfg
        self.weights_version = 0
        self._lock = anyio.Lock()
        self._model: Any = None
        self._tok: Any = None
        self._eos: list[int] = []
        self._tied = False

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
        self._model = model

    async def generate(
        self, prompt: str | list[ChatMessage], n: int, sampling: SamplingParams
    ) -> GroupResult:
        prompt_ids = render_prompt_ids(self._tok, prompt)
        if len(prompt_ids) > self.cfg.max_prompt_tokens:
            raise PromptTooLongError(len(prompt_ids), self.cfg.max_prompt_tokens)
        async with self._lock:
            version = self.weights_version
            generations = await anyio.to_thread.run_sync(self._generate, prompt_ids, n, sampling)
        return GroupResult(
            prompt_ids=prompt_ids,
            generations=generations,
            weights_version_min=version,
            weights_version_max=version,
        )

    def _generate(self, prompt_ids: list[int], n: int, sampling: SamplingParams) -> list[Generation]:
        import torch

        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        out: list[Generation] = []
        for start in range(0, n, self.cfg.max_batch):
            out.extend(self._generate_chunk(prompt_ids, min(self.cfg.max_batch, n - start), sampling))
        return out

    def _generate_chunk(self, prompt_ids: list[int], n: int, sampling: SamplingParams) -> list[Generation]:
        import torch
        from transformers import GenerationConfig

        greedy = sampling.temperature == 0.0
        gen_cfg = GenerationConfig(
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy or sampling.top_p >= 1.0 else sampling.top_p,
            top_k=0 if greedy or sampling.top_k <= 0 else sampling.top_k,
            max_new_tokens=sampling.max_tokens,
            num_return_sequences=n,
            eos_token_id=self._eos,
            pad_token_id=self._model.generation_config.pad_token_id,
            stop_strings=list(sampling.stop) or None,
            output_scores=True,
            return_dict_in_generate=True,
        )
        x = torch.tensor([prompt_ids], device=self.cfg.device)
        with torch.inference_mode():
            res = self._model.generate(
                input_ids=x,
                attention_mask=torch.ones_like(x),
                generation_config=gen_cfg,
                tokenizer=self._tok if sampling.stop else None,
            )
        new = res.sequences[:, len(prompt_ids) :]  # [n, T]
        # scores: T tensors [n, V] of processed logits -> log-probs of the sampled ids
        scores = torch.stack(res.scores, dim=1).float()  # [n, T, V]
        lp = torch.log_softmax(scores, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)  # [n, T]
        return [self._finish(new[i].tolist(), lp[i].tolist(), sampling) for i in range(n)]

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
        import torch

        if files is not None:
            verify_weight_files(directory, files)
        expected = {k: tuple(v.shape) for k, v in self._model.state_dict().items()}
        check_weight_index(read_weight_index(directory), expected, tied=self._tied)
        state = load_state_dict(directory)
        # Validated above: from here on nothing can leave the model half-loaded.
        with torch.no_grad():
            params = self._model.state_dict()
            for name, tensor in state.items():
                if name in params:
                    params[name].copy_(tensor.to(params[name].dtype))

    async def close(self) -> None:
        self._model = None


__all__ = ["HFEngine"]
