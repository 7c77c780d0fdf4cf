"""Shared fixtures for the engine tests: one tiny model, one engine of each kind.

The model is built once per session, and each engine is started once per
session (vLLM start-up costs ~15 s on CPU). Engines live on an asyncio loop in
a background thread, so tests stay plain synchronous functions that call
``loop.run(coro)``. Tests that change weights load the weights they need
first; versions only grow (``versions``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

# vLLM reads these at import time.
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

MAX_MODEL_LEN = 256
MAX_PROMPT_TOKENS = 64


class LoopThread:
    """An asyncio event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="session")
def loop() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.stop()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlvr.learner.example.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def _save(state: dict, directory: Path) -> Path:
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, directory / "model.safetensors")
    return directory


@pytest.fixture(scope="session")
def weight_dirs(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Weight blobs as the learner publishes them (full state dict, lm_head included).

    base: the model's own weights; perturbed: every tensor moved by noise;
    head: only the tied embedding / lm_head changed; no_head: perturbed
    without lm_head.weight; truncated: base with its file cut short.
    """
    import torch
    from safetensors.torch import load_file

    root = tmp_path_factory.mktemp("weights")
    base = load_file(tiny_model / "model.safetensors")
    base["lm_head.weight"] = base["model.embed_tokens.weight"].clone()
    g = torch.Generator().manual_seed(1)
    perturbed = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in base.items()}
    perturbed["lm_head.weight"] = perturbed["model.embed_tokens.weight"].clone()
    head = dict(base)
    new_embed = base["model.embed_tokens.weight"] + 0.1 * torch.randn(base["lm_head.weight"].shape, generator=g)
    head["model.embed_tokens.weight"] = new_embed
    head["lm_head.weight"] = new_embed.clone()
    no_head = {k: v for k, v in perturbed.items() if k != "lm_head.weight"}
    dirs = {
        "base": _save(base, root / "base"),
        "perturbed": _save(perturbed, root / "perturbed"),
        "head": _save(head, root / "head"),
        "no_head": _save(no_head, root / "no_head"),
    }
    data = (dirs["base"] / "model.safetensors").read_bytes()
    (root / "truncated").mkdir()
    (root / "truncated" / "model.safetensors").write_bytes(data[: len(data) - 1000])
    dirs["truncated"] = root / "truncated"
    return dirs


@pytest.fixture(scope="session")
def versions() -> Iterator[int]:
    return itertools.count(1)


class Reference:
    """Log-probs of given completions under given weights, by a transformers forward pass."""

    def __init__(self, model_dir: Path) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32").eval()
        self._loaded: Path | None = None

    def logprobs(self, weights: Path, prompt_ids: list[int], ids: list[int], temperature: float) -> list[float]:
        import torch

        from rlvr.rollout.weights import load_state_dict

        if self._loaded != weights:
            self.model.load_state_dict(load_state_dict(weights), strict=True)
            self._loaded = weights
        x = torch.tensor([prompt_ids + ids])
        with torch.no_grad():
            logits = self.model(x).logits[0, len(prompt_ids) - 1 : -1].float()  # [T, V]
        lp = torch.log_softmax(logits / temperature, dim=-1)
        return lp.gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1).tolist()

    def max_diff(self, weights: Path, result: Any, temperature: float) -> float:
        worst = 0.0
        for g in result.generations:
            ref = self.logprobs(weights, result.prompt_ids, g.ids, temperature)
            worst = max([worst] + [abs(a - b) for a, b in zip(g.logprobs, ref, strict=True)])
        return worst


@pytest.fixture(scope="session")
def reference(tiny_model: Path) -> Reference:
    return Reference(tiny_model)


def _vllm_importable() -> str | None:
    try:
        import vllm  # noqa: F401
    except Exception as e:  # any import failure means "no vLLM here"
        return f"vllm cannot be imported: {e!r}"
    return None


@pytest.fixture(scope="session")
def hf_engine(tiny_model: Path, loop: LoopThread) -> Iterator[Any]:
    from rlvr.rollout.engines import HFEngineConfig, make_engine

    engine = make_engine(HFEngineConfig(model=str(tiny_model), max_prompt_tokens=MAX_PROMPT_TOKENS, max_batch=8))
    loop.run(engine.start())
    yield engine
    loop.run(engine.close())


@pytest.fixture(scope="session")
def vllm_engine(tiny_model: Path, loop: LoopThread) -> Iterator[Any]:
    reason = _vllm_importable()
    if reason:
        pytest.skip(reason)
    from rlvr.rollout.engines import VLLMEngineConfig, make_engine

    cfg = VLLMEngineConfig(
        model=str(tiny_model),
        dtype="float32",
        max_model_len=MAX_MODEL_LEN,
        max_prompt_tokens=MAX_PROMPT_TOKENS,
        kv_cache_memory_bytes=64 << 20,
        max_num_seqs=32,
        # KV blocks of 32 tokens (128 on CPU by default): a test prompt fills one, so the prefix cache is
        # exercised (test_engine_vllm.py, a prompt cached before a reload).
        extra={"block_size": 32},
    )
    engine = make_engine(cfg)
    loop.run(engine.start(), timeout=300)
    yield engine
    loop.run(engine.close(), timeout=60)


@pytest.fixture(params=["hf", pytest.param("vllm", marks=pytest.mark.slow)])
def engine(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{request.param}_engine")
