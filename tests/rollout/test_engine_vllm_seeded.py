"""vLLM on CPU: seeded requests whose prefills do not fit one engine step are
served, and stay reproducible. With chunked prefill, vLLM splits such a
prefill and rewinds the request's seeded generator, which a CPU generator
refuses: the engine core died and took the replica with it
(``whole_prefills_on_cpu`` in rollout/engines/vllm.py)."""

from __future__ import annotations

import asyncio
import os

import pytest

from rlvr.protocol import SamplingParams

from tests.rollout.conftest import MAX_MODEL_LEN, MAX_PROMPT_TOKENS, _vllm_importable

pytestmark = pytest.mark.slow

REQUESTS = 120  # ~60 prompt tokens each: ~7,000 prefill tokens at once, past a 2,048-token step


def _prompts(tokenizer) -> list[str]:
    prompts = []
    for i in range(REQUESTS):
        terms = [str((7 * i + 3 * k) % 97) for k in range(40)]
        text = "+".join(terms) + "="
        ids = tokenizer(text)["input_ids"]
        while len(ids) > MAX_PROMPT_TOKENS - 2:
            terms.pop()
            text = "+".join(terms) + "="
            ids = tokenizer(text)["input_ids"]
        prompts.append(text)
    return prompts


def test_seeded_requests_past_one_steps_token_budget_are_served_and_reproducible(loop, tiny_model):
    reason = _vllm_importable()
    if reason:
        pytest.skip(reason)
    from transformers import AutoTokenizer

    from rlvr.rollout.engines import VLLMEngineConfig, make_engine

    extra = {}
    if os.environ.get("RLVR_TEST_CHUNKED_PREFILL"):  # to see the failure this test guards against
        extra = {"enable_chunked_prefill": True, "max_num_batched_tokens": 2048}
    cfg = VLLMEngineConfig(
        model=str(tiny_model), dtype="float32", max_model_len=MAX_MODEL_LEN, max_prompt_tokens=MAX_PROMPT_TOKENS,
        kv_cache_memory_bytes=64 << 20, max_num_seqs=REQUESTS, extra=extra,
    )
    prompts = _prompts(AutoTokenizer.from_pretrained(str(tiny_model)))
    engine = make_engine(cfg)
    loop.run(engine.start(), timeout=300)
    try:
        async def all_at_once():
            return await asyncio.gather(
                *(engine.generate(p, 1, SamplingParams(max_tokens=4, seed=i)) for i, p in enumerate(prompts))
            )

        first = loop.run(all_at_once(), timeout=300)
        prompt_tokens = sum(len(r.prompt_ids) for r in first)
        assert prompt_tokens > 2 * 2048, prompt_tokens  # more than two steps' worth: some prefill had to wait
        assert all(len(r.generations) == 1 and r.generations[0].ids for r in first)
        again = loop.run(all_at_once(), timeout=300)
        assert [r.generations[0].ids for r in again] == [r.generations[0].ids for r in first]
    finally:
        loop.run(engine.close(), timeout=60)
