"""Tokens/s of a generation engine called directly, with no actor and no bus.

The baseline for the rollout benchmark: the same prompts, group size,
sampling and concurrency go through ``Engine.generate`` in-process, so the
difference with a replica's throughput is the cost of the actor and NATS.

    python bench/engine_direct.py --engine vllm --model DIR --groups 64 --n 8 --concurrency 16

Without ``--model`` a tiny model is built in a temporary folder. It does not
measure the actor; bench/ next to it does that.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import anyio
import msgspec

from rlvr.protocol import SamplingParams
from rlvr.rollout.engines import Engine, HFEngineConfig, TrivialEngineConfig, VLLMEngineConfig, make_engine


class DirectResult(msgspec.Struct, frozen=True):
    groups: int
    samples: int
    tokens: int
    seconds: float
    tokens_per_s: float
    samples_per_s: float


def arithmetic_prompts(count: int, seed: int = 0) -> list[str]:
    import random

    rng = random.Random(seed)
    return [f"{rng.randint(0, 99)}{rng.choice('+-')}{rng.randint(0, 99)}=" for _ in range(count)]


async def measure_direct(
    engine: Engine, prompts: list[str], n: int, sampling: SamplingParams, concurrency: int
) -> DirectResult:
    """Generate one group per prompt with at most ``concurrency`` groups in flight."""
    limiter = anyio.CapacityLimiter(concurrency)
    tokens = samples = 0

    async def one(prompt: str) -> None:
        nonlocal tokens, samples
        async with limiter:
            result = await engine.generate(prompt, n, sampling)
        samples += len(result.generations)
        tokens += sum(len(g.ids) for g in result.generations)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for p in prompts:
            tg.start_soon(one, p)
    seconds = time.perf_counter() - start
    return DirectResult(len(prompts), samples, tokens, seconds, tokens / seconds, samples / seconds)


def _config(args: argparse.Namespace, model: str):
    if args.engine == "trivial":
        return TrivialEngineConfig()
    if args.engine == "hf":
        return HFEngineConfig(model=model)
    return VLLMEngineConfig(
        model=model, dtype="float32", max_model_len=512, max_prompt_tokens=128, kv_cache_memory_bytes=256 << 20
    )


async def _main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None and args.engine != "trivial":
            from rlvr.learner.example.tiny_model import build_tiny_model

            model = str(build_tiny_model(Path(tmp) / "model"))
        engine = make_engine(_config(args, model or ""))
        await engine.start()
        try:
            sampling = SamplingParams(temperature=1.0, max_tokens=args.max_tokens, seed=args.seed)
            result = await measure_direct(engine, arithmetic_prompts(args.groups, args.seed), args.n, sampling, args.concurrency)
        finally:
            await engine.close()
    print(json.dumps(msgspec.to_builtins(result)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", choices=["vllm", "hf", "trivial"], default="vllm")
    p.add_argument("--model", default=None)
    p.add_argument("--groups", type=int, default=32)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    anyio.run(_main, p.parse_args())


if __name__ == "__main__":
    main()
