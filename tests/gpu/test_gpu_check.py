"""GPU checks (``-m gpu``; skipped where CUDA is absent): run by bench/gpu_check.sh.

On a Qwen2.5-0.5B-shaped random model built from a config (tests/gpu/qwen_shape.py):

- the learner on DeepSpeed ZeRO-2 and ZeRO-3, full parameters and LoRA, and QLoRA
  (a 4-bit base) where bitsandbytes is installed;
- the vLLM engine's log-probs against the learner's (<= 0.01), after a
  reload of full weights and after an adapter, both taken from the learner;
- a few steps of ``rlvr-actor up`` with examples/gpu_qwen.toml pointed at it.

Each check prints one ``GPUCHECK <name> key=value...`` line (tokens/s, peak
GPU memory, reload seconds) that bench/gpu_check.sh gathers into its table.
The model folder comes from ``RLVR_GPU_MODEL`` (the script builds it once)
or is built here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import msgspec
import pytest

from tests.conftest import REPO
from tests.rollout.conftest import LoopThread

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::FutureWarning")]
TOL = 0.01


def report(name: str, **figures: Any) -> None:
    print("GPUCHECK " + name + " " + " ".join(f"{k}={v}" for k, v in figures.items()), flush=True)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("RLVR_GPU_MODEL"):
        return Path(os.environ["RLVR_GPU_MODEL"])
    from tests.gpu.qwen_shape import build_qwen05b_shaped

    return build_qwen05b_shaped(tmp_path_factory.mktemp("qwen") / "qwen05b")


def _items(n: int, length: int, seed: int) -> list:
    import torch

    from rlvr.learner.train.engine import TrainBatchItem

    g = torch.Generator().manual_seed(seed)
    return [TrainBatchItem(torch.randint(400, 150000, (64,), generator=g).tolist(),
                           torch.randint(400, 150000, (length,), generator=g).tolist(),
                           [-8.0] * length, 1.0 if i % 2 else -1.0, f"s{seed}/{i}") for i in range(n)]


def _learner(model: Path, zero_stage: int, lora: bool, quantize_base: str = "none", **extra: Any):
    from rlvr.learner.train.engine import LearnerEngine
    from rlvr.learner.engine_config import LoraConfig, OptimizerConfig, TrainEngineConfig

    saved = dict(os.environ)  # DeepSpeed's single-process dist env must not reach vLLM's workers
    engine = LearnerEngine(TrainEngineConfig(
        model_path=str(model), zero_stage=zero_stage, micro_batch_tokens=8192,
        optimizer=OptimizerConfig(lr=1e-5 if lora else 1e-6), lora=LoraConfig(enabled=lora, rank=16, quantize_base=quantize_base),
        pad_token_id=0, **extra), seed=0)
    os.environ.clear()
    os.environ.update(saved)
    return engine


ZERO3_LORA = pytest.mark.xfail(reason="LoRA under ZeRO-3 is refused by the config for now (learner/engine_config.py)")


@pytest.mark.parametrize(("zero_stage", "lora"), [(2, False), (2, True), (3, False), pytest.param(3, True, marks=ZERO3_LORA)],
                         ids=["2-full", "2-lora", "3-full", "3-lora"])
def test_learner_trains_under_zero(qwen, zero_stage, lora):
    import torch

    torch.cuda.reset_peak_memory_stats()
    engine = _learner(qwen, zero_stage, lora, bf16=True, gradient_checkpointing=True)
    before = engine.logprobs([500, 600, 700], [800, 900, 1000])
    tokens, seconds = 0.0, 0.0
    for step in range(3):
        m = engine.train_step(_items(32, 448, step))
        assert all(v == v for v in (m["loss"], m["grad_norm"])), m  # finite, not NaN
        if step:  # the first step includes DeepSpeed's lazy set-up
            tokens, seconds = tokens + m["tokens"], seconds + m["step_time_s"]
    after = engine.logprobs([500, 600, 700], [800, 900, 1000])
    assert before != after, "three optimizer steps did not move the policy"
    report(f"learner_zero{zero_stage}_{'lora' if lora else 'full'}", tokens_per_s=round(tokens / seconds),
           peak_mem_gb=round(torch.cuda.max_memory_allocated() / 2**30, 2))
    engine.close()


def test_qlora_learner_trains_on_a_4bit_base(qwen):
    """QLoRA: the frozen base in NF4 through bitsandbytes (skipped where it is not installed)."""
    pytest.importorskip("bitsandbytes")
    import torch

    torch.cuda.reset_peak_memory_stats()
    engine = _learner(qwen, 2, True, quantize_base="4bit", bf16=True, gradient_checkpointing=True)
    before = engine.logprobs([500, 600, 700], [800, 900, 1000])
    m = engine.train_step(_items(32, 448, 0))
    assert m["loss"] == m["loss"]
    assert engine.logprobs([500, 600, 700], [800, 900, 1000]) != before
    report("learner_qlora_4bit", peak_mem_gb=round(torch.cuda.max_memory_allocated() / 2**30, 2),
           tokens_per_s=round(m["tokens_per_s"]))
    engine.close()


@pytest.fixture(scope="module")
def gpu_loop() -> Iterator[LoopThread]:
    """vLLM's AsyncLLM stays on the event loop it started on: one loop, in a thread, for the module."""
    lt = LoopThread()
    yield lt
    lt.stop()


@pytest.fixture(scope="module")
def vllm_engine(qwen: Path, gpu_loop: LoopThread) -> Iterator[Any]:
    from rlvr.rollout.engines import VLLMEngineConfig, make_engine

    engine = make_engine(VLLMEngineConfig(model=str(qwen), dtype="float32", max_model_len=1024, max_prompt_tokens=512,
                                          gpu_memory_utilization=0.3, max_lora_rank=16))
    gpu_loop.run(engine.start(), timeout=600)
    yield engine
    gpu_loop.run(engine.close(), timeout=60)


@pytest.mark.parametrize("path", ["adapter", "full"])
def test_vllm_logprobs_match_the_learner_after_a_reload(qwen, vllm_engine, gpu_loop, tmp_path, path):
    """The adapter path runs first: it applies to the base vLLM started with."""
    import torch

    from rlvr.protocol import SamplingParams

    engine = _learner(qwen, 2, path == "adapter")
    engine.train_step(_items(8, 128, 0))
    if path == "adapter":
        with torch.no_grad():  # adapters far from zero, so a wrong load shows
            for name, p in engine.ds.module.named_parameters():
                if ".lora_B." in name:
                    p.add_(0.02 * torch.randn_like(p))
    files = engine.export_weights(tmp_path)
    version = 10 if path == "adapter" else 11
    load = vllm_engine.load_adapter if path == "adapter" else vllm_engine.load_weights
    t0 = time.perf_counter()
    gpu_loop.run(load(tmp_path, version), timeout=300)
    reload_s = time.perf_counter() - t0
    sampling = SamplingParams(temperature=1.0, max_tokens=128, seed=3)
    t0 = time.perf_counter()
    result = gpu_loop.run(vllm_engine.generate("Solve: 12+7=", 16, sampling), timeout=300)
    gen_s = time.perf_counter() - t0
    assert result.weights_version_min == result.weights_version_max == version
    worst = max(abs(a - b) for g in result.generations
                for a, b in zip(g.logprobs, engine.logprobs(result.prompt_ids, g.ids), strict=True))
    report(f"vllm_{path}", max_logprob_diff=f"{worst:.1e}", reload_s=round(reload_s, 2),
           bytes=sum(size for _, _, size in files),
           tokens_per_s=round(sum(len(g.ids) for g in result.generations) / gen_s))
    engine.close()
    assert worst <= TOL


def up_config(qwen: Path) -> dict:
    """examples/gpu_qwen.toml pointed at ``qwen``, for three short steps."""
    from rlvr.cli.run_config import load_config

    raw = msgspec.to_builtins(load_config(REPO / "examples" / "gpu_qwen.toml"))
    raw["run"] = "gpu-check"
    raw["rollout"]["engine"].update(model=str(qwen), gpu_memory_utilization=0.3)
    learn = raw["learn"]
    learn.update(steps=3, groups_per_step=4, group_size=4, checkpoint_every=3)
    learn["sampling"]["max_tokens"] = 128
    learn["eval"].update(prompts=8, n=2, ks=[1, 2], every_steps=0)
    learn["engine"]["model_path"] = str(qwen)
    learn["engine"]["pad_token_id"] = 0
    raw["up"].update(display="plain")
    return raw


def test_up_runs_gpu_qwen_for_a_few_steps(qwen, tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_bytes(msgspec.json.encode(up_config(qwen)))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "rlvr.cli", "up", "--config", str(cfg),
                          "--run-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=1200, cwd=REPO)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    report("up_gpu_qwen", steps=summary.get("steps"), wall_s=round(time.perf_counter() - t0),
           learner_tokens_per_s=summary.get("tokens_per_s_mean", "n/a"))
    assert summary["steps"] == 3
