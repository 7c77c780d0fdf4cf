"""New weights into a running vLLM engine in memory: no safetensors file written, none read.

vLLM's model lives in its engine-core process, and ``AsyncLLM.collective_rpc`` sends its arguments
there as msgpack, which rebuilds a tensor only where the called method's annotation says so (never
for a list of tensors). So the tensors travel by POSIX shared memory instead:

1. a ``SharedBlock``: one shared-memory block holding every tensor, 64-byte aligned. The
   collective receives the broadcast straight into the engine's own block (``tensor_block``;
   ``SharedBlock.alloc`` gives the receive its tensors: rollout/collective.py), so the bytes are
   written once, into memory already touched: the block is kept from one version to the next
   (one copy of the weights in ``/dev/shm`` for the replica's life) and unlinked when the engine
   closes. Tensors from elsewhere (received on a GPU, or handed over by ``rlvr-actor doctor``)
   are copied into that block first (``fill``);
2. ``collective_rpc("rlvr_load_shared", kwargs={"block": name, "index": index})`` runs
   ``SharedWeights.rlvr_load_shared`` in the worker (a vLLM worker extension, the engine's
   ``worker_extension_cls``): it maps the block (``MAP_POPULATE``: the page tables in one call, not
   a fault per page), makes a tensor view of each entry (no copy) and hands them to the worker's
   own ``reload_weights(weights_iterator=...)``, vLLM's in-place reload, the same code as a reload
   from a folder without the disk;
3. the worker drops its mapping once the call returns, whatever happened.

The block is created by ``multiprocessing.shared_memory`` (its resource tracker unlinks a block
whose replica was killed); the worker maps it by name without registering it, so the tracker the
two processes share (vLLM spawns the core) sees one owner. A block larger than the free space of
``/dev/shm`` is refused with an error that says so: writing past a full tmpfs would kill the
replica with SIGBUS (a container's default ``/dev/shm`` is 64 MB: ``--shm-size`` or
``--ipc=host``, as vLLM asks anyway).

What was measured (SmolLM2-135M, 2-core CPU): docs/benchmarks.md, "Weights without a file". Not
covered: GPU replicas, where vLLM's own NCCL weight transfer (``init_weight_transfer_engine``)
moves tensors device to device; this path goes through host memory (docs/deploy.md has the 7B
arithmetic).
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from rlvr.actors.collective import DTYPE_TAGS
from rlvr.rollout.weights import TensorInfo, WeightsRejectedError, check_weight_index

if TYPE_CHECKING:
    import torch

# The worker extension's qualified name, given to vLLM as ``worker_extension_cls``.
EXTENSION = "rlvr.rollout.engines.vllm_weights.SharedWeights"
SHM_DIR = "/dev/shm"
_ALIGN = 64  # each tensor starts on a cache-line boundary in the block


def _aligned(n: int) -> int:
    return int(math.ceil(n / _ALIGN) * _ALIGN)


class SharedTensors(dict):
    """Name -> tensor, every tensor a view into ``block`` (what ``SharedBlock.alloc`` returns)."""

    block: SharedBlock


class SharedBlock:
    """One shared-memory block holding one version's tensors at a time: made by the first ``alloc``,
    reused by the next ones with the same layout (every version of a model has it: no new memory,
    whose page faults cost 0.45 s per 651 MB here, and no unlink), gone after ``close``."""

    def __init__(self) -> None:
        self.shm: Any = None
        self.index: list[tuple[str, str, list[int], int]] = []  # name, dtype, shape, byte offset
        self.tensors: SharedTensors | None = None

    @property
    def name(self) -> str:
        return self.shm.name

    def alloc(self, specs: list[tuple[str, torch.dtype, tuple[int, ...]]]) -> SharedTensors:
        """Tensors of these (name, dtype, shape) to write the next version into, laid out in this
        block (a new block when the layout differs from the last one's; the old one is unlinked)."""
        from multiprocessing import shared_memory

        import torch

        index, offset = [], 0
        for name, dtype, shape in specs:
            index.append((name, str(dtype).removeprefix("torch."), list(shape), offset))
            offset += _aligned(math.prod(shape) * dtype.itemsize)
        if self.shm is None or index != self.index:
            self.close()
            _check_room(offset)
            self.shm = shared_memory.SharedMemory(create=True, size=max(offset, 1))
            self.index = index
        self.tensors = SharedTensors()
        self.tensors.block = self
        for (name, dtype, shape), (_, _, _, start) in zip(specs, self.index, strict=True):
            count = math.prod(shape)
            flat = torch.frombuffer(self.shm.buf, dtype=dtype, count=count, offset=start) if count else \
                torch.empty(0, dtype=dtype)
            self.tensors[name] = flat.view(shape)
        return self.tensors

    def close(self) -> None:
        """Drop the views, unmap and unlink the block (idempotent, never raises)."""
        if self.tensors is not None:
            self.tensors.clear()  # no view may outlive the mapping
        shm, self.shm = self.shm, None
        if shm is None:
            return
        try:
            shm.close()
        finally:
            try:
                shm.unlink()
            except FileNotFoundError:
                pass


class CheckedBlock(SharedBlock):
    """A ``SharedBlock`` whose ``alloc`` first checks the names and shapes against the model's
    (``check_weight_index``): a version that cannot load is refused before a byte is received."""

    def __init__(self, expected: dict[str, tuple[int, ...]], *, tied: bool) -> None:
        super().__init__()
        self._expected, self._tied = expected, tied

    def alloc(self, specs: list[tuple[str, torch.dtype, tuple[int, ...]]]) -> SharedTensors:
        index = {name: TensorInfo(file="<memory>", dtype=DTYPE_TAGS.get(str(dtype).removeprefix("torch."), "?"),
                                  shape=tuple(shape)) for name, dtype, shape in specs}
        check_weight_index(index, self._expected, tied=self._tied)
        return super().alloc(specs)


def _check_room(nbytes: int) -> None:
    """Refuse a block ``/dev/shm`` cannot hold (writing past a full tmpfs is a SIGBUS, not an error)."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return  # no /dev/shm to ask (not Linux): the block's creation says what is wrong
    free = st.f_bavail * st.f_frsize
    if nbytes > free:
        raise WeightsRejectedError(
            f"the weights need {nbytes / 2**20:.0f} MiB of shared memory to reach vLLM's worker and {SHM_DIR} "
            f"has {free / 2**20:.0f} MiB free: give the container more (docker --shm-size, or --ipc=host)"
        )


def fill(block: SharedBlock, state: dict[str, Any]) -> SharedTensors:
    """Every tensor of ``state`` copied into ``block`` (one copy each; off a GPU too). A tied head
    that shares its storage with the embeddings is copied under each of its names (vLLM's loader
    takes each name it is given)."""
    views = block.alloc([(name, t.dtype, tuple(t.shape)) for name, t in state.items()])
    for name, t in state.items():
        views[name].copy_(t.detach())
    return views


def pack_shared(state: dict[str, Any]) -> SharedBlock:
    """``state`` in a new block of its own, the caller's to ``close()``."""
    block = SharedBlock()
    try:
        fill(block, state)
    except BaseException:
        block.close()
        raise
    return block


class SharedWeights:
    """Mixed into vLLM's worker (``worker_extension_cls``): ``rlvr_load_shared`` loads weights from a
    block a ``SharedBlock`` holds, through the worker's own in-place reload."""

    def rlvr_load_shared(self, block: str, index: list) -> dict[str, float]:
        """Loads the block's tensors; returns their count and when the load ``started`` and ``ended``
        (``time.monotonic``, which the engine's process shares: rollout/engines/vllm.py times the
        wait before it)."""
        import mmap
        import time

        import torch

        started = time.monotonic()
        size = max([offset + _aligned(math.prod(shape) * getattr(torch, dtype).itemsize)
                    for _, dtype, shape, offset in index] or [1])
        fd = os.open(os.path.join(SHM_DIR, block.lstrip("/")), os.O_RDWR)
        try:
            buf = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
        finally:
            os.close(fd)
        views: list = []
        try:
            for name, dtype, shape, offset in index:
                dt = getattr(torch, dtype)
                count = math.prod(shape)
                flat = torch.frombuffer(buf, dtype=dt, count=count, offset=offset) if count else torch.empty(0, dtype=dt)
                views.append((name, flat.view(shape)))
            self.reload_weights(weights_iterator=views, is_checkpoint_format=True)  # type: ignore[attr-defined]
            return {"tensors": len(index), "started": started, "ended": time.monotonic()}
        finally:
            views.clear()  # no view may outlive the mapping
            flat = None
            buf.close()


__all__ = ["EXTENSION", "CheckedBlock", "SharedBlock", "SharedTensors", "SharedWeights", "fill", "pack_shared"]
