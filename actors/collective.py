"""Weights by collective: the wire both ends of the ``"nccl"`` transport share.

The learner (``rlvr.learner.weights.collective``, rank 0 of every group) and each rollout
replica (``rlvr.rollout.collective``, rank 1) speak this, over ``torch.distributed``
used directly: never the default process group (the learner's DeepSpeed may own it).

Rendezvous. The learner hosts a ``TCPStore`` at ``[learn.collective] address``
(replicas connect to the same host:port). Everything the two sides say outside
the tensors goes through that store, never a new NATS subject:

- ``groups`` (a counter): a replica about to join takes the next number ``n``;
- ``events`` (a queue of msgpack ``Event``): a replica announces itself
  (``join``, with its ``n``) or asks for the current version through the
  object store (``fetch``: its fallback). The learner pops them in order; a
  queue has no holes, so a replica that died half-way leaves nothing to skip.
  The learner ends its own wait by pushing ``stop``.
- ``dropped/<n>``: set by either side when group ``n`` is finished with
  (failed, timed out, left); the other side checks it before the next use.

One group per join. A join ``n`` gets a 2-rank group over ``PrefixStore("g<n>/")``
(``ProcessGroupGloo`` on CPU, ``ProcessGroupNCCL`` on GPU), learner rank 0; a
group is never reused: a replica that lost its group joins again and gets a new
``n``. Once formed, rank 0 broadcasts the first version the replica will be sent
(one int64), so both sides agree where the collective starts for it.

One version on the wire: an int64 length, then a msgpack ``Header`` (version,
names, dtypes, shapes, the sha256 over the tensors), then each tensor's bytes as
a uint8 buffer, in header order (bit-equal for every dtype, bf16 included: gloo
and NCCL only move bytes). ``tensors_sha256`` hashes, in order, each name, dtype
tag, shape and the raw bytes; the announcement on the bus carries the same digest,
so a replica checks what it received against what the learner announced.

Timeouts: every store operation and every collective runs under the group's
``timeout_s`` (the store's and the process group's own timeout); callers also run
them in worker threads with an outer deadline, so nothing here can hang a loop.

torch is imported lazily: the verifier role imports ``rlvr.actors`` and loads no torch.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import msgspec

if TYPE_CHECKING:
    import torch

Backend = Literal["auto", "nccl", "gloo"]
EVENTS = "events"
GROUPS = "groups"

# torch dtype name -> safetensors tag (the names rlvr.rollout.weights checks).
DTYPE_TAGS = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
    "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
}  # fmt: skip


class CollectiveError(RuntimeError):
    """A collective failed, timed out or disagreed with the announcement: fall back."""


class Event(msgspec.Struct, frozen=True):
    kind: Literal["join", "fetch", "stop"]
    replica: str = ""
    group: int = 0  # join: the group number the replica took from GROUPS
    version: int = 0  # fetch: the version the replica asks for (the learner serves its current one)


class Header(msgspec.Struct, frozen=True):
    version: int
    names: list[str]
    dtypes: list[str]  # torch dtype names ("float32", "bfloat16"...)
    shapes: list[list[int]]
    sha256: str


def parse_address(address: str, key: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> (host, port); a ValueError names ``key``."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{key} = {address!r}: expected host:port (a port in 1..65535)")
    return host, int(port)


def location(backend: str, host: str, port: int) -> str:
    """What an announcement's ``location`` says for the ``"nccl"`` transport."""
    return f"{backend}://{host}:{port}"


def parse_location(loc: str) -> tuple[str, str, int]:
    """(backend, host, port) of an announcement's ``location``."""
    backend, sep, rest = loc.partition("://")
    if not sep or backend not in ("nccl", "gloo"):
        raise CollectiveError(f"announcement location {loc!r} is not <nccl|gloo>://host:port")
    host, port = parse_address(rest, "location")
    return backend, host, port


def resolve_backend(backend: Backend) -> str:
    """``auto``: NCCL where CUDA is, gloo elsewhere."""
    if backend != "auto":
        return backend
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def _td(seconds: float) -> dt.timedelta:
    return dt.timedelta(seconds=seconds)


def open_store(host: str, port: int, *, master: bool, timeout_s: float) -> Any:
    """The learner's store (``master``: it listens on ``port``) or a client of it."""
    from torch.distributed import TCPStore

    if master:
        return TCPStore(host, port, None, True, _td(timeout_s), wait_for_workers=False)
    return TCPStore(host, port, None, False, _td(timeout_s))


def post_event(store: Any, event: Event) -> None:
    store.queue_push(EVENTS, msgspec.msgpack.encode(event))


def next_event(store: Any) -> Event | None:
    """The next event (blocks up to the store's timeout); None for one that does not decode."""
    raw = store.queue_pop(EVENTS)
    try:
        return msgspec.msgpack.decode(raw, type=Event)
    except msgspec.DecodeError:
        return None


def take_group_number(store: Any) -> int:
    return int(store.add(GROUPS, 1))


def is_dropped(store: Any, n: int) -> bool:
    return bool(store.check([f"dropped/{n}"]))


def mark_dropped(store: Any, n: int) -> None:
    try:
        store.set(f"dropped/{n}", b"1")
    except Exception:  # the store is gone: the group is over for both sides anyway
        pass


def new_group(store: Any, n: int, rank: int, backend: str, timeout_s: float) -> Any:
    """The 2-rank process group of join ``n`` (blocks until both ranks are there, at most ``timeout_s``)."""
    import torch.distributed as dist

    prefixed = dist.PrefixStore(f"g{n}/", store)
    if backend == "gloo":
        return dist.ProcessGroupGloo(prefixed, rank, 2, _td(timeout_s))
    if not hasattr(dist, "ProcessGroupNCCL"):
        raise CollectiveError("backend nccl: this torch build has no NCCL (a CPU build?); use gloo")
    opts = dist.ProcessGroupNCCL.Options()
    opts._timeout = _td(timeout_s)
    return dist.ProcessGroupNCCL(prefixed, rank, 2, opts)


def _bcast(pg: Any, tensor: torch.Tensor, timeout_s: float) -> None:
    work = pg.broadcast(tensor, 0, _td(timeout_s))
    work.wait(_td(timeout_s))


def _raw(t: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes as a flat uint8 view (contiguous copy if needed)."""
    import torch

    t = t.detach().contiguous()
    return t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8, device=t.device)


def tensors_sha256(items: Iterable[tuple[str, torch.Tensor]]) -> str:
    """sha256 over (name, dtype, shape, bytes) of each tensor, in order (CPU copies of GPU tensors)."""
    h = hashlib.sha256()
    for name, t in items:
        h.update(f"{name}\0{str(t.dtype).removeprefix('torch.')}\0{tuple(t.shape)}\0".encode())
        h.update(memoryview(_raw(t).cpu().numpy()))  # the bytes in place: no copy of the tensor
    return h.hexdigest()


def header_for(version: int, state: Mapping[str, torch.Tensor]) -> Header:
    names = list(state)
    return Header(
        version=version,
        names=names,
        dtypes=[str(state[n].dtype).removeprefix("torch.") for n in names],
        shapes=[list(state[n].shape) for n in names],
        sha256=tensors_sha256(state.items()),
    )


def send_first_version(pg: Any, first: int, device: str, timeout_s: float) -> None:
    import torch

    _bcast(pg, torch.tensor([first], dtype=torch.int64, device=device), timeout_s)


def recv_first_version(pg: Any, device: str, timeout_s: float) -> int:
    import torch

    t = torch.zeros(1, dtype=torch.int64, device=device)
    _bcast(pg, t, timeout_s)
    return int(t.item())


def send_state(pg: Any, header: Header, state: Mapping[str, torch.Tensor], device: str, timeout_s: float) -> None:
    """Rank 0: the header, then every tensor of ``state`` (moved to ``device`` one at a time)."""
    import torch

    blob = msgspec.msgpack.encode(header)
    _bcast(pg, torch.tensor([len(blob)], dtype=torch.int64, device=device), timeout_s)
    _bcast(pg, torch.frombuffer(bytearray(blob), dtype=torch.uint8).to(device), timeout_s)
    for name in header.names:
        _bcast(pg, _raw(state[name].to(device)), timeout_s)


MAX_HEADER_BYTES = 64 << 20


def recv_state(
    pg: Any, device: str, timeout_s: float, alloc: Callable[[list[tuple[str, torch.dtype, tuple[int, ...]]]],
                                                           Mapping[str, torch.Tensor]] | None = None,
) -> tuple[Header, Mapping[str, torch.Tensor]]:
    """Rank 1: the header and the tensors (on ``device``); the sha256 is the caller's to check.
    ``alloc`` places them: given (name, dtype, shape) of each, it returns empty tensors to receive
    into (a block of shared memory the engine reads, say); by default one new tensor each."""
    import torch

    n = torch.zeros(1, dtype=torch.int64, device=device)
    _bcast(pg, n, timeout_s)
    size = int(n.item())
    if not 0 < size <= MAX_HEADER_BYTES:
        raise CollectiveError(f"header of {size} bytes")
    raw = torch.empty(size, dtype=torch.uint8, device=device)
    _bcast(pg, raw, timeout_s)
    try:
        header = msgspec.msgpack.decode(raw.cpu().numpy().tobytes(), type=Header)
    except msgspec.DecodeError as e:
        raise CollectiveError(f"unreadable header: {e}") from e
    if not len(header.names) == len(header.dtypes) == len(header.shapes):
        raise CollectiveError("header lists disagree in length")
    specs = []
    for name, dtype_name, shape in zip(header.names, header.dtypes, header.shapes, strict=True):
        dtype = getattr(torch, dtype_name, None)
        if not isinstance(dtype, torch.dtype) or dtype_name not in DTYPE_TAGS:
            raise CollectiveError(f"{name}: dtype {dtype_name!r}")
        specs.append((name, dtype, tuple(shape)))
    if alloc is None:
        out: Mapping[str, torch.Tensor] = {name: torch.empty(shape, dtype=dtype, device=device)
                                           for name, dtype, shape in specs}
    else:
        out = alloc(specs)
    for name, dtype, shape in specs:
        t = out[name]
        _bcast(pg, _raw(t) if t.numel() else torch.empty(0, dtype=torch.uint8, device=device), timeout_s)
    return header, out


def finish_group(pg: Any) -> None:
    """Release a group after a failure or on leaving (never raises)."""
    for method in ("abort", "shutdown"):
        fn = getattr(pg, method, None)
        if fn is not None:
            try:
                fn()
                return
            except Exception:  # best effort: the group is dropped either way
                continue


__all__ = [
    "Backend",
    "CollectiveError",
    "Event",
    "Header",
    "finish_group",
    "header_for",
    "location",
    "new_group",
    "open_store",
    "parse_address",
    "parse_location",
    "is_dropped",
    "mark_dropped",
    "next_event",
    "post_event",
    "take_group_number",
    "recv_first_version",
    "recv_state",
    "resolve_backend",
    "send_first_version",
    "send_state",
    "tensors_sha256",
]
