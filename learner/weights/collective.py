"""The learner's end of the collective weights transport (``weights_transport = "nccl"``).

The wire (store keys, group per join, header then tensors) is rlvr.actors.collective.
Decisions made here:

- **Where the tensors come from.** A ``Snapshot`` (learner/weights/snapshot.py): the
  trainer copies the policy in memory in the export dtype, and that copy is what every
  replica's sender broadcasts; with NCCL each tensor is moved to the device as it is
  sent. No file is written for it, nor read back.
- **What the training loop waits for.** ``publish`` hands the snapshot to the publisher
  task and returns: the loop waits for the copy only, and for the previous version's
  hand-off when that one is still being hashed (one version at a time, in order). The
  publisher hashes the snapshot (``tensors_sha256``), announces it (transport
  ``"nccl"``, the digest, retried as any publish), then hands it to each member's
  sender. The digest is of the private copy the senders send, never touched again, so
  a replica's check against the announcement holds exactly as when the loop hashed it.
- **Export folders** only where something reads them (``Snapshot.export``, off the
  loop): ``fallback = "path"`` exports every version before its announcement (which
  names the folder); every ``keep_weights_every``-th version is exported after it; a
  replica's object-store fallback exports the version it gets; and when the host stops,
  the newest version is exported (``eval --checkpoint``, the next stage). A learner
  killed with SIGKILL leaves the newest exported one instead.
- **Registration.** ``run`` hosts the ``TCPStore`` and pops the events queue in a
  worker thread. A ``join`` starts a thread that forms that replica's 2-rank group
  (bounded by ``timeout_s``) and, under the host's lock, records the first version
  it will be sent (the next one announced) and tells the replica.
- **Sending.** A sender broadcasts one version at a time, with one more waiting; a
  member that still has a version waiting when the next one comes is too slow and
  is dropped, and so is one whose broadcast fails or times out (``dropped/<n>`` in
  the store tells it). A dropped replica joins again (a new group) and gets what it
  missed by fallback. The training loop never waits for a replica.
- **Fallback.** ``fallback = "path"``: the announcement names the export folder.
  ``fallback = "object_store"``: a replica posts ``fetch``; the learner exports and
  uploads its *current* version (the one it would get anyway) to the run's bucket once
  and announces it a second time as ``object_store`` (msg id ``weights/<v>/fallback``).
  Uploads and announcements share one lock, so a fallback announcement never
  lands after a newer version's.
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import anyio

from rlvr.actors import collective as wire
from rlvr.actors.bus import Bus
from rlvr.actors.logs import get_logger
from rlvr.actors.retry import retrying
from rlvr.learner.config import CollectiveConfig
from rlvr.learner.weights.publish import publish_weights
from rlvr.learner.weights.snapshot import Snapshot

log = get_logger("rlvr.learner.weights.collective")


@dataclass
class _Payload:
    header: wire.Header
    snapshot: Snapshot  # held while a sender has it: its buffers are reused only once none does


@dataclass(eq=False)
class _Member:
    group: int
    replica: str
    pg: Any
    first_version: int
    pending: _Payload | None = None  # the next version to send
    inflight: _Payload | None = None  # the version being sent
    closed: bool = False
    sent: int = 0  # versions broadcast to it
    wake: threading.Condition = field(default_factory=threading.Condition)


class CollectiveHost:
    def __init__(self, cfg: CollectiveConfig) -> None:
        self.cfg = cfg
        self.host, self.port = wire.parse_address(cfg.address, "learn.collective.address")
        self.backend = wire.resolve_backend(cfg.backend)
        self.device = cfg.device or ("cuda" if self.backend == "nccl" else "cpu")
        self.location = wire.location(self.backend, self.host, self.port)
        self.store: Any = None
        self._bus: Bus | None = None
        self._mu = threading.Lock()  # members and the announced version
        self._members: dict[int, _Member] = {}
        self._announced = 0  # the last version announced; a member formed now starts after it
        self._lock = anyio.Lock()  # announcements (regular and fallback) in version order
        self._last: Snapshot | None = None  # the newest version announced
        self._newest: Snapshot | None = None  # the newest version handed over (announced or not yet)
        # Versions from the training loop to the publisher: no buffer, so one is hashed and
        # announced at a time and the loop waits only while the previous one is.
        self._handoff, self._versions = anyio.create_memory_object_stream[Snapshot](0)
        self._uploaded = -1  # the version already in the object store for fallback
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._popped = threading.Event()  # set while no thread waits on the events queue
        self._popped.set()
        self.dropped = 0
        self.fallbacks_served = 0

    # --- the host's life ------------------------------------------------------------
    async def run(self, bus: Bus, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Host the rendezvous and serve events until cancelled."""
        self._bus = bus
        self.store = await anyio.to_thread.run_sync(
            functools.partial(wire.open_store, self.host, self.port, master=True, timeout_s=self.cfg.timeout_s)
        )
        events = self.store.clone()
        # The event wait is idle between joins: it ends on an event, and stop() pushes one.
        import datetime as dt

        events.set_timeout(dt.timedelta(days=365))
        log.info("collective_listening", location=self.location, backend=self.backend)
        task_status.started()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._publisher, bus)
                while True:
                    ev = await anyio.to_thread.run_sync(self._next_event, events, abandon_on_cancel=True)
                    if ev is None:
                        log.warning("collective_event_invalid")
                    elif ev.kind == "stop":
                        break
                    elif ev.kind == "join":
                        self._spawn(self._form, ev)
                    elif ev.kind == "fetch":
                        tg.start_soon(self._serve_fetch, ev)
                tg.cancel_scope.cancel()
        finally:
            del events
            with anyio.CancelScope(shield=True):
                await self._export_newest()
            self.close()

    async def _export_newest(self) -> None:
        """The newest version's export folder, so that the run leaves it (never raises: a failed
        write costs ``eval --checkpoint`` that version, not the learner's exit code)."""
        newest = self._newest
        if newest is None or newest.files is not None:
            return
        try:
            await anyio.to_thread.run_sync(newest.export)
            log.info("weights_exported", version=newest.version, directory=str(newest.directory), why="last version")
        except Exception as e:
            log.error("weights_export_failed", version=newest.version, error=_short(e))

    def _next_event(self, events: Any) -> wire.Event | None:
        """``wire.next_event`` in a worker thread; ``close`` waits for it to return."""
        self._popped.clear()
        try:
            return wire.next_event(events)
        finally:
            self._popped.set()

    def stop(self) -> None:
        """Wake the event wait so ``run`` returns (also fine when it is cancelled instead)."""
        if self.store is not None:
            try:
                wire.post_event(self.store, wire.Event(kind="stop"))
            except Exception as e:
                log.debug("collective_stop_event_failed", error=repr(e))

    def close(self, join_s: float = 5.0) -> None:
        """Drop every member, wait (at most ``join_s``) for the threads, and release the
        groups and the store now. Left to the interpreter's exit, a gloo pair or the
        store's server thread is destroyed while still running, and the C++ runtime
        aborts the process (exit -6) after a clean stop."""
        self.stop()
        self._stopping.set()
        with self._mu:
            members = list(self._members.values())
            self._members.clear()
        for m in members:
            self._drop(m, "the learner is stopping", log_it=False)
        deadline = time.monotonic() + join_s
        self._popped.wait(join_s)  # the event wait, abandoned on cancel, returns on the stop event
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        for m in members:
            m.pg = None
        self.store = None

    @property
    def members(self) -> list[str]:
        with self._mu:
            return [m.replica for m in self._members.values()]

    def _spawn(self, target, *args) -> None:
        t = threading.Thread(target=target, args=args, daemon=True, name=f"collective-{target.__name__}")
        self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()

    # --- joining --------------------------------------------------------------------
    def _form(self, ev: wire.Event) -> None:
        """Form the group of one join (a worker thread: the event loop never waits on a replica)."""
        try:
            pg = wire.new_group(self.store, ev.group, 0, self.backend, self.cfg.timeout_s)
            with self._mu:
                first = self._announced + 1
                member = _Member(ev.group, ev.replica, pg, first)
                self._members[ev.group] = member
            wire.send_first_version(pg, first, self.device, self.cfg.timeout_s)
        except Exception as e:
            wire.mark_dropped(self.store, ev.group)
            with self._mu:
                self._members.pop(ev.group, None)
            log.warning("collective_join_failed", replica=ev.replica, group=ev.group, error=_short(e))
            return
        log.info("collective_joined", replica=ev.replica, group=ev.group, first_version=first, backend=self.backend)
        self._send_loop(member)

    def _send_loop(self, m: _Member) -> None:
        while True:
            with m.wake:
                while m.pending is None and not m.closed:
                    m.wake.wait()
                if m.closed:
                    return
                payload, m.inflight, m.pending = m.pending, m.pending, None
            assert payload is not None
            try:
                if wire.is_dropped(self.store, m.group):
                    raise wire.CollectiveError("the replica left the group")
                wire.send_state(m.pg, payload.header, payload.snapshot.tensors, self.device, self.cfg.timeout_s)
            except Exception as e:
                self._drop(m, f"broadcast of v{payload.header.version} failed: {_short(e)}")
                return
            m.sent += 1
            log.debug("collective_sent", replica=m.replica, version=payload.header.version)
            with m.wake:
                m.inflight = None

    def _drop(self, m: _Member, reason: str, log_it: bool = True) -> None:
        with self._mu:
            if self._members.get(m.group) is m:
                del self._members[m.group]
        with m.wake:
            m.closed = True
            m.wake.notify_all()
        if self.store is not None:
            wire.mark_dropped(self.store, m.group)
        wire.finish_group(m.pg)
        if log_it:
            self.dropped += 1
            log.warning("collective_replica_dropped", replica=m.replica, group=m.group, reason=reason)

    # --- publishing -----------------------------------------------------------------
    async def publish(self, snapshot: Snapshot) -> None:
        """Hand ``snapshot`` to the publisher (which hashes, announces and broadcasts it); returns
        once the publisher has taken it, so at once unless the previous version is still being
        hashed or announced."""
        self._newest = snapshot
        await self._handoff.send(snapshot)

    async def _publisher(self, bus: Bus) -> None:
        async with self._versions:
            async for snapshot in self._versions:
                await self._announce(bus, snapshot)

    async def _announce(self, bus: Bus, snap: Snapshot) -> None:
        """Hash ``snap``, announce it (transport "nccl"), hand it to every member's sender."""
        t0 = time.monotonic()
        header = await anyio.to_thread.run_sync(wire.header_for, snap.version, snap.tensors)
        hash_s = time.monotonic() - t0
        by_path = self.cfg.fallback == "path"
        if by_path:  # the announcement names the folder: it exists first
            await anyio.to_thread.run_sync(snap.export)
        payload = _Payload(header, snap)
        async with self._lock:
            with self._mu:
                self._announced = max(self._announced, snap.version)
                targets = [m for m in self._members.values() if m.first_version <= snap.version]
            # A full store or a leader election delays the announcement; it does not end the run.
            async for attempt in retrying("publish_weights", until=bus.cfg.topology_wait_s, wait_initial=0.5,
                                          version=snap.version):
                with attempt:
                    await publish_weights(
                        bus, snap.directory, snap.files or [], version=snap.version, step=snap.step,
                        dtype=snap.plan.dtype, tied_embeddings=snap.tied_embeddings, transport="nccl",
                        location=self.location, tensors_sha256=header.sha256, nbytes=snap.nbytes,
                        fallback_path=str(snap.directory.resolve()) if by_path else "",
                    )
            self._last = snap
        log.info("weights_announced", version=snap.version, hash_s=round(hash_s, 3),
                 announced_after_s=round(time.monotonic() - t0, 3), members=len(targets))
        for m in targets:
            with m.wake:
                if m.closed or any(p is not None and p.header.version == snap.version for p in (m.pending, m.inflight)):
                    continue  # gone, or a version published again (a restart) that it already has in hand
                behind = m.pending.header.version if m.pending is not None else None
                if behind is None:
                    m.pending = payload
                    m.wake.notify_all()
            if behind is not None:  # one version on the wire and one waiting: too slow for this pace
                self._drop(m, f"v{behind} still waiting to be sent when v{snap.version} came")
        if snap.plan.kept(snap.version):
            await anyio.to_thread.run_sync(snap.export)

    async def _serve_fetch(self, ev: wire.Event) -> None:
        """A replica's fallback: the current version exported and put in the object store, once, announced."""
        bus = self._bus
        async with self._lock:
            last = self._last
            if bus is None or last is None:
                log.warning("collective_fetch_unanswered", replica=ev.replica, asked=ev.version,
                            reason="no version published yet")
                return
            if self._uploaded == last.version:
                return  # announced already: the replica sees it on the WEIGHTS stream
            try:
                files = await anyio.to_thread.run_sync(last.export)
                await publish_weights(
                    bus, last.directory, files, version=last.version, step=last.step, dtype=last.plan.dtype,
                    tied_embeddings=last.tied_embeddings, transport="object_store", msg_id_suffix="/fallback",
                )
            except Exception as e:  # the replica asks again on its next miss
                log.warning("collective_fetch_failed", replica=ev.replica, version=last.version, error=_short(e))
                return
            self._uploaded = last.version
            self.fallbacks_served += 1
        log.info("collective_fallback_published", replica=ev.replica, asked=ev.version, version=last.version)


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    return text if len(text) <= 300 else text[:297] + "..."


__all__ = ["CollectiveHost"]
