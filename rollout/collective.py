"""A rollout replica's end of the collective weights transport (rank 1 of its group).

The wire is rlvr.actors.collective; the watcher (rollout/weights_sync.py) decides
when to join, receive and fall back. Every blocking call here runs in a worker
thread under an outer deadline as well as the store's and the group's own
``timeout_s``, so a dead or slow learner costs at most that, never a hang.

- ``join``: connect to the learner's store, take a group number, post ``join``,
  form the group (rank 1) and read the first version the learner will send.
- ``receive``: one version: the header (its version must be the announcement's),
  the tensors (into the engine's own block where it has one: vLLM's shared memory),
  their sha256 against the header's and the announcement's.
- ``leave``: after any failure; marks the group dropped so the learner stops
  sending to it. The watcher joins again later with a new group.
- ``request_fetch``: the object-store fallback: ask the learner (through the
  store) to upload and announce its current version.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import anyio

from rlvr.actors import collective as wire
from rlvr.actors.logs import get_logger
from rlvr.rollout.config import RolloutCollectiveConfig

log = get_logger("rlvr.rollout.collective")


class CollectiveClient:
    def __init__(self, cfg: RolloutCollectiveConfig, replica: str) -> None:
        self.cfg = cfg
        self.replica = replica
        self.store: Any = None
        self.address: tuple[str, int] | None = None
        self.backend = ""
        self.pg: Any = None
        self.group = 0
        self.first_version = math.inf  # nothing is received before a join says where it starts
        self.joins = 0
        self.received = 0
        self.receive_s = self.digest_s = 0.0  # the last version's broadcast and its sha256 check

    @property
    def member(self) -> bool:
        return self.pg is not None

    @property
    def device(self) -> str:
        """Where tensors are received: ``rollout.collective.device``, else cuda for NCCL, cpu for gloo."""
        return self.cfg.device or ("cuda" if self.backend == "nccl" else "cpu")

    @property
    def join_deadline_s(self) -> float:
        """The longest any call here takes: the calls below each have timeout_s; a join makes three
        of them in a row."""
        return 3 * self.cfg.timeout_s + 5

    async def _in_thread(self, fn, *args):
        with anyio.fail_after(self.join_deadline_s):
            return await anyio.to_thread.run_sync(functools.partial(fn, *args), abandon_on_cancel=True)

    def target(self, announced: str) -> tuple[str, str, int]:
        """(backend, host, port) to use for an announcement's ``location``."""
        backend, host, port = wire.parse_location(announced)
        if self.cfg.address:
            host, port = wire.parse_address(self.cfg.address, "rollout.collective.address")
        want = self.cfg.backend
        if want != "auto" and want != backend:
            raise wire.CollectiveError(f"rollout.collective.backend = {want!r} but the learner broadcasts with {backend!r}")
        return backend, host, port

    # --- the store ------------------------------------------------------------------
    def _connect(self, host: str, port: int) -> Any:
        if self.store is None or self.address != (host, port):
            _listening(host, port)
            self.store = wire.open_store(host, port, master=False, timeout_s=self.cfg.timeout_s)
            self.address = (host, port)
        return self.store

    # --- joining --------------------------------------------------------------------
    async def join(self, backend: str, host: str, port: int) -> None:
        """Join the learner's broadcast (raises CollectiveError or the store's error on failure)."""
        self.leave()
        self.backend = backend
        self.pg, self.group, self.first_version = await self._in_thread(self._join, host, port)
        self.joins += 1
        log.info("collective_joined", group=self.group, first_version=self.first_version, backend=backend,
                 address=f"{host}:{port}")

    def _join(self, host: str, port: int) -> tuple[Any, int, int]:
        store = self._connect(host, port)
        n = wire.take_group_number(store)
        wire.post_event(store, wire.Event(kind="join", replica=self.replica, group=n))
        try:
            pg = wire.new_group(store, n, 1, self.backend, self.cfg.timeout_s)
            first = wire.recv_first_version(pg, self.device, self.cfg.timeout_s)
        except BaseException:
            wire.mark_dropped(store, n)
            raise
        return pg, n, first

    def leave(self) -> None:
        pg, self.pg = self.pg, None
        self.first_version = math.inf
        if pg is None:
            return
        if self.store is not None:
            wire.mark_dropped(self.store, self.group)
        wire.finish_group(pg)

    # --- one version ----------------------------------------------------------------
    async def receive(self, version: int, sha256: str, into: Any = None) -> dict[str, Any]:
        """The tensors of ``version`` from the broadcast, checked; leaves the group on any failure.
        ``into``: where to receive them (an engine's ``tensor_block()``: its ``alloc`` gives the
        tensors to fill), else new tensors."""
        try:
            state = await self._in_thread(self._receive, version, sha256, into.alloc if into is not None else None)
        except BaseException:
            self.leave()
            raise
        self.received += 1
        return state

    def _receive(self, version: int, sha256: str, alloc) -> dict[str, Any]:
        if self.store is not None and wire.is_dropped(self.store, self.group):
            raise wire.CollectiveError("the learner dropped this replica from the collective")
        t0 = time.monotonic()
        header, state = wire.recv_state(self.pg, self.device, self.cfg.timeout_s, alloc)
        if header.version != version:
            raise wire.CollectiveError(f"the learner sent v{header.version}, the announcement is v{version}")
        t1 = time.monotonic()
        digest = wire.tensors_sha256(state.items())
        if digest != header.sha256 or digest != sha256:
            raise wire.CollectiveError(
                f"tensors sha256 {digest[:12]}…, header {header.sha256[:12]}…, announced {sha256[:12]}…"
            )
        self.receive_s, self.digest_s = t1 - t0, time.monotonic() - t1
        return state

    async def request_fetch(self, host: str, port: int, version: int) -> None:
        """Ask the learner to put its current version in the object store (the fallback)."""

        def post() -> None:
            wire.post_event(self._connect(host, port), wire.Event(kind="fetch", replica=self.replica, version=version))

        await self._in_thread(post)


def _listening(host: str, port: int) -> None:
    """Raise ``ConnectionRefusedError`` (an ``OSError``) unless something listens at host:port: one
    plain connect, 5 s at most. TCPStore's client retries a refused connect itself, with a backoff of
    seconds, in C++ that nothing interrupts: a replica that joined before the learner listened waited
    out that backoff, and could not exit meanwhile. A connect to a port of the ephemeral range with
    nothing behind it can also meet itself (TCP's simultaneous open): that is no learner either."""
    import socket

    with socket.create_connection((host, port), timeout=5) as s:
        if s.getsockname() == s.getpeername():
            raise ConnectionRefusedError(f"nothing listens at {host}:{port} (the connect met itself)")


__all__ = ["CollectiveClient"]
