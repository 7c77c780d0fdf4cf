"""Weight-sync time per step and learner memory: full weights against a LoRA adapter.

For each mode (``full``, ``lora``) a fresh process builds the learner
(DeepSpeed, CPU accelerator), takes two optimizer steps on a synthetic batch
(so gradients and AdamW states exist) and records its peak RSS. Then it runs
the weight sync the way a run does, ``--repeats`` times:

- export: the learner writes the safetensors (or the adapter) with sha256;
- put: every file goes into a JetStream object store on a real nats-server;
- get: the rollout side fetches them into its cache (``writeinto``);
- load: the rollout engine checks sha256 and sizes and loads them
  (``load_weights``, or ``load_adapter`` on the base it already serves).

    python bench/lora_sync.py --model models/smollm2-135m-instruct --engine hf
    python bench/lora_sync.py --engine vllm          # tiny model built locally

It prints one JSON line per mode, medians in seconds, and the bytes sent.
Not covered: the announcement round trip (a few ms) and NCCL transports.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio


def _batch(n: int, length: int, vocab: int):
    import torch

    from rlvr.learner.train.engine import TrainBatchItem

    g = torch.Generator().manual_seed(0)
    return [
        TrainBatchItem(torch.randint(3, vocab, (16,), generator=g).tolist(),
                       torch.randint(3, vocab, (length,), generator=g).tolist(),
                       [-3.0] * length, 1.0 if i % 2 else -1.0, f"s{i}")
        for i in range(n)
    ]


async def _sync_once(store, engine, learner, work: Path, version: int, adapter: bool) -> dict[str, float]:
    from rlvr.protocol import WeightFile

    out, cache = work / f"out{version}", work / f"cache{version}"
    t0 = time.perf_counter()
    files = learner.export_weights(out)
    t1 = time.perf_counter()
    for name, _, _ in files:
        with open(out / name, "rb") as f:
            await store.put(f"v{version}/{name}", f)
    t2 = time.perf_counter()
    cache.mkdir()
    for name, _, _ in files:
        with open(cache / name, "wb") as f:
            await store.get(f"v{version}/{name}", writeinto=f)
    t3 = time.perf_counter()
    wire = [WeightFile(name, sha, size) for name, sha, size in files]
    load = engine.load_adapter if adapter else engine.load_weights
    await load(cache, version, wire)
    t4 = time.perf_counter()
    return {"export_s": t1 - t0, "put_s": t2 - t1, "get_s": t3 - t2, "load_s": t4 - t3, "total_s": t4 - t0,
            "bytes": float(sum(size for _, _, size in files))}


async def _measure(args: argparse.Namespace) -> dict:
    import nats
    import torch
    from transformers import AutoConfig

    from rlvr.cli.natsserver import NatsServer
    from rlvr.learner.train.engine import LearnerEngine
    from rlvr.learner.engine_config import LoraConfig, OptimizerConfig, TrainEngineConfig
    from rlvr.rollout.engines import HFEngineConfig, VLLMEngineConfig, make_engine

    adapter = args.mode == "lora"
    vocab = AutoConfig.from_pretrained(args.model).vocab_size
    saved = dict(os.environ)
    learner = LearnerEngine(
        TrainEngineConfig(model_path=args.model, zero_stage=args.zero_stage, micro_batch_tokens=1024,
                          optimizer=OptimizerConfig(lr=1e-5), lora=LoraConfig(enabled=adapter, rank=args.rank)),
        seed=0,
    )
    os.environ.clear()
    os.environ.update(saved)  # DeepSpeed's dist env must not reach vLLM's spawned core
    trainable = sum(p.numel() for p in learner.ds.module.parameters() if p.requires_grad)
    steps = [learner.train_step(_batch(args.samples, args.length, vocab))["step_time_s"] for _ in range(2)]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.engine == "vllm":
        ecfg = VLLMEngineConfig(model=args.model, dtype="float32", max_model_len=256, max_prompt_tokens=64,
                                kv_cache_memory_bytes=64 << 20, max_num_seqs=8,
                                max_lora_rank=args.rank if adapter else None)
    else:
        ecfg = HFEngineConfig(model=args.model)
    engine = make_engine(ecfg)
    await engine.start()
    rows = []
    with tempfile.TemporaryDirectory() as tmp, NatsServer(Path(tmp) / "nats") as server:
        nc = await nats.connect(server.url)
        store = await nc.jetstream().create_object_store("bench-weights")
        for r in range(args.repeats):
            rows.append(await _sync_once(store, engine, learner, Path(tmp), r + 1, adapter))
        await nc.close()
    await engine.close()
    learner.close()
    med = {k: round(statistics.median(row[k] for row in rows), 4) for k in rows[0]}
    return {"mode": args.mode, "engine": args.engine, "model": args.model, "zero_stage": args.zero_stage,
            "trainable_params": trainable, "learner_peak_rss_mb": round(peak_mb),
            "train_step_s": round(statistics.median(steps), 3), "sync_median": med, "repeats": args.repeats,
            "threads": torch.get_num_threads()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="HF model folder; default: a tiny model built in a temporary folder")
    p.add_argument("--engine", choices=["hf", "vllm"], default="hf")
    p.add_argument("--mode", choices=["full", "lora", "both"], default="both")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--zero-stage", type=int, default=2)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--length", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    if args.model is None:
        from rlvr.learner.example.tiny_model import build_tiny_model

        args.model = str(build_tiny_model(Path(tempfile.mkdtemp(prefix="lora-bench-")) / "tiny", seed=0))
    if args.mode != "both":
        print(json.dumps(anyio.run(_measure, args)), flush=True)
        return
    for mode in ("full", "lora"):  # a process each: peak RSS is per process
        cmd = [sys.executable, __file__, "--model", args.model, "--engine", args.engine, "--mode", mode,
               "--rank", str(args.rank), "--zero-stage", str(args.zero_stage), "--samples", str(args.samples),
               "--length", str(args.length), "--repeats", str(args.repeats)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        print(lines[-1] if lines else f"{mode}: failed\n{out.stderr[-3000:]}", flush=True)


if __name__ == "__main__":
    main()
