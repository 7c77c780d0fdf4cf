"""vLLM on CPU: the model worker in the engine-core process, or in a process of its own.

    OMP_NUM_THREADS=1 python bench/vllm_cpu_busy_wait.py --model models/smollm2-135m-instruct
    OMP_NUM_THREADS=1 python bench/vllm_cpu_busy_wait.py --model models/smollm2-135m-instruct --worker-process

With a worker process of its own (vLLM's "mp" executor, which its CPU
platform picks by default), the engine core and the worker exchange every
step through a shared-memory queue whose reader busy-waits for a second after
each read: while the worker computes, the core spins, and the other way
round. This script generates the same 32 chat prompts x 4 samples twice and
prints, per round, tokens/s and the CPU seconds every process of the engine
used, then the CPU used over 5 idle seconds. The project's default
(``rollout.engine.worker_in_engine_process = true``) is the first command.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

import psutil


def cpu_seconds() -> float:
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


async def run(args: argparse.Namespace) -> None:
    from rlvr.protocol.tasks import ChatMessage, SamplingParams
    from rlvr.rollout.engines.base import VLLMEngineConfig
    from rlvr.rollout.engines.vllm import VLLMEngine

    engine = VLLMEngine(VLLMEngineConfig(
        model=args.model, dtype="float32", max_model_len=256, max_prompt_tokens=128,
        kv_cache_memory_bytes=1 << 28, worker_in_engine_process=not args.worker_process,
    ))
    await engine.start()
    rng = random.Random(0)
    prompts = [[ChatMessage("user", f"What is {rng.randint(0, 20)} + {rng.randint(0, 20)}? "
                                    "Put the final answer in \\boxed{}.")] for _ in range(32)]
    sampling = SamplingParams(temperature=1.0, max_tokens=32)
    mode = "worker process" if args.worker_process else "in engine core"
    try:
        await engine.generate(prompts[0], 2, sampling)  # warm-up
        for round_ in range(args.rounds):
            wall, cpu = time.monotonic(), cpu_seconds()
            groups = await asyncio.gather(*[engine.generate(p, 4, sampling) for p in prompts])
            wall, cpu = time.monotonic() - wall, cpu_seconds() - cpu
            tokens = sum(len(g.ids) for group in groups for g in group.generations)
            print(f"{mode} round {round_}: {tokens} tokens in {wall:.1f} s, {tokens / wall:.0f} tok/s, "
                  f"CPU {cpu:.1f} s ({cpu / wall:.2f} cores)", flush=True)
        cpu = cpu_seconds()
        await asyncio.sleep(5)  # measuring idle CPU: nothing to wait for
        print(f"{mode} idle: {(cpu_seconds() - cpu) / 5:.2f} cores", flush=True)
    finally:
        await engine.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="local HF model folder")
    p.add_argument("--worker-process", action="store_true", help="vLLM's default on CPU: a worker process of its own")
    p.add_argument("--rounds", type=int, default=2)
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
