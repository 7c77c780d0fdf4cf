"""The shared-memory block that carries received tensors to vLLM's worker (rollout/engines/vllm_weights.py),
without vLLM: the worker's side is ``SharedWeights`` with the reload replaced by a copy (what vLLM's
reload does with the views is tests/rollout/test_engine_vllm.py's)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from rlvr.rollout.engines import vllm_weights
from rlvr.rollout.engines.vllm_weights import SharedBlock, SharedWeights, pack_shared
from rlvr.rollout.weights import WeightsRejectedError
from tests.conftest import REPO


class _Worker(SharedWeights):
    def reload_weights(self, weights_iterator, is_checkpoint_format):
        self.got = {name: t.clone() for name, t in weights_iterator}


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    embed = torch.randn(7, 5, generator=g)
    return {"model.embed_tokens.weight": embed, "lm_head.weight": embed, "bf": torch.randn(3, generator=g).bfloat16(),
            "empty": torch.empty(0, 4), "ids": torch.arange(9)}


def test_the_worker_reads_every_tensor_bit_for_bit_and_the_block_is_gone_after_close():
    state = _state()
    block = pack_shared(state)
    path = os.path.join(vllm_weights.SHM_DIR, block.name)
    assert os.path.exists(path)
    worker = _Worker()
    done = worker.rlvr_load_shared(block.name, block.index)
    assert done["tensors"] == len(state) and done["started"] <= done["ended"]
    for name, t in state.items():
        assert worker.got[name].dtype == t.dtype and torch.equal(worker.got[name], t), name
    block.close()
    block.close()  # idempotent
    assert not os.path.exists(path)
    assert block.tensors == {}  # no view outlives the mapping


def test_a_block_larger_than_dev_shm_can_hold_is_refused_naming_the_remedy(monkeypatch):
    class Tiny:  # a container's default /dev/shm: 64 MiB
        f_bavail, f_frsize = 64 * 256, 4096

    monkeypatch.setattr(vllm_weights.os, "statvfs", lambda path: Tiny())
    block = SharedBlock()
    with pytest.raises(WeightsRejectedError, match="shm-size") as e:
        block.alloc([("model.embed_tokens.weight", torch.float32, (49152, 576))])
    assert "108 MiB" in str(e.value) and "64 MiB free" in str(e.value)
    assert block.shm is None  # nothing was created


def test_the_worker_maps_a_block_without_taking_it_from_its_owner(tmp_path):
    """vLLM spawns its engine core, which shares the replica's resource tracker. A worker that
    registered and unregistered the block there took it from the replica: the replica's unlink then
    made the tracker fail (a KeyError traceback on every reload), and a replica killed meanwhile
    would leak the block in /dev/shm."""
    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp
        import torch
        from rlvr.rollout.engines.vllm_weights import SharedWeights, pack_shared

        class Worker(SharedWeights):
            def reload_weights(self, weights_iterator, is_checkpoint_format):
                self.n = sum(1 for _ in weights_iterator)

        def load(name, index):
            Worker().rlvr_load_shared(name, index)

        if __name__ == "__main__":
            block = pack_shared({"w": torch.ones(1000)})
            child = mp.get_context("spawn").Process(target=load, args=(block.name, block.index))
            child.start()
            child.join()
            assert child.exitcode == 0
            block.close()
            print("closed", flush=True)
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and "closed" in out.stdout, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "leaked" not in out.stderr, out.stderr[-3000:]


def test_a_block_is_reused_for_the_same_layout_and_replaced_for_another():
    """Every version of a model has one layout: it is written into the same memory (no page faults,
    no unlink per version); a different layout gets a new block and the old one is unlinked."""
    state = _state()
    specs = [(name, t.dtype, tuple(t.shape)) for name, t in state.items()]
    block = SharedBlock()
    first = block.alloc(specs)
    name, ptr = block.name, first["bf"].data_ptr()
    again = block.alloc(specs)
    assert block.name == name and again["bf"].data_ptr() == ptr
    block.alloc(specs[:2])  # another layout
    assert block.name != name and not os.path.exists(os.path.join(vllm_weights.SHM_DIR, name))
    block.close()

