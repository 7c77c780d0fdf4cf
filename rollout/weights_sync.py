"""Watch weight announcements and load new policies into the engine.

The WEIGHTS stream keeps the last announcement, so a replica that starts late
still gets the current policy. A newer version is fetched (object store, read
with ``writeinto=`` into a file: the default in-memory read is quadratic in
the chunk count, or used in place for the path transport), its sha256 and
sizes are checked against the announcement, and only then loaded. A corrupt,
partial or missing blob is rejected and logged, and the old weights stay in
service; the next announcement gets a fresh try. An announcement flagged
``adapter`` (a LoRA run) goes to the engine's ``load_adapter`` with the same
checks; an engine without one rejects it and keeps its weights.

Collective (transport ``"nccl"``, gloo or NCCL; rollout/collective.py): the
replica joins the learner's broadcast (at start when
``rollout.collective.address`` is set, else on the first such announcement),
and for each announcement it is a member for, receives the tensors (the
version and sha256 checked against the announcement; into the engine's
``tensor_block`` where it has one: vLLM's shared memory) and hands them to the
engine's ``load_state_dict``. Whenever that cannot happen (not joined yet,
joined after this version, the collective failed or timed out, the backend
disagrees, ``join = false``) it logs ``weights_collective_fallback`` with the
reason and falls back: it reads the announcement's ``fallback_path``, or asks
the learner through its store to upload the current version to the object
store, whose announcement then arrives here like any other. After a failure it
leaves the group and joins again (a new group) on the next announcement.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from nats.js import api as js_api
from opentelemetry import trace

import msgspec

from rlvr.actors.bus import Bus
from rlvr.actors.collective import CollectiveError
from rlvr.actors.logs import get_logger
from rlvr.actors.retry import FOREVER, retrying
from rlvr.actors.tracing import tracer
from rlvr.protocol import MessageDecodeError, MessageInvalidError, WeightFile, WeightsAnnouncement, check_message, decode
from rlvr.rollout.collective import CollectiveClient
from rlvr.rollout.config import RolloutConfig
from rlvr.rollout.engines.base import EngineDeadError
from rlvr.rollout.weights import WeightsRejectedError, verify_weight_files

if TYPE_CHECKING:
    from rlvr.rollout.actor import RolloutActor

log = get_logger("rlvr.rollout.weights")


class WeightsWatcher:
    def __init__(self, bus: Bus, actor: RolloutActor, cfg: RolloutConfig) -> None:
        self.bus = bus
        self.actor = actor
        self.cfg = cfg
        self.cache = Path(cfg.weights_cache_dir or tempfile.mkdtemp(prefix="rlvr-weights-"))
        self.rejected = 0
        ctx = getattr(actor, "ctx", None)
        self.collective = CollectiveClient(cfg.collective, getattr(ctx, "replica", "") or "rollout")
        self.fallbacks = 0
        self._joining = False
        self._join_done = anyio.Event()  # set when the join under way ends, joined or not
        self._announced = False  # a collective announcement came: joins follow its address
        self._tg: anyio.abc.TaskGroup | None = None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        sub = await self.bus.js.subscribe(
            self.bus.names.weights,
            ordered_consumer=True,
            deliver_policy=js_api.DeliverPolicy.LAST_PER_SUBJECT,
        )
        task_status.started()
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                if self.cfg.collective.join and self.cfg.collective.address:
                    tg.start_soon(self._join, "")
                async for msg in sub.messages:
                    try:
                        ann = decode(msg.data, WeightsAnnouncement)
                        check_message(ann)
                    except (MessageDecodeError, MessageInvalidError) as e:
                        log.error("weights_announcement_invalid", reason=e.reason)
                        continue
                    if ann.version <= self.actor.version:
                        continue
                    if ann.transport == "nccl":
                        self._announced = True
                        await self.apply_collective(ann)
                    else:
                        await self.apply(ann)
                tg.cancel_scope.cancel()
        finally:
            self.collective.leave()
            with anyio.CancelScope(shield=True):
                await sub.unsubscribe()

    # --- the collective transport ---------------------------------------------------
    async def _join(self, announced: str) -> None:
        """Join the learner's broadcast in the background (one attempt; the next announcement retries)."""
        c = self.collective
        if self._joining or c.member or not self.cfg.collective.join:
            return
        self._joining, self._join_done = True, anyio.Event()
        try:
            if announced:
                backend, host, port = c.target(announced)
                await c.join(backend, host, port)
            else:
                from rlvr.actors.collective import parse_address, resolve_backend

                backend = resolve_backend(self.cfg.collective.backend)
                host, port = parse_address(self.cfg.collective.address, "rollout.collective.address")
                # At start the learner may not listen yet (it starts its engine first): wait for it,
                # until a first announcement comes (then the next one joins where that one says).
                def again(e: BaseException) -> bool:
                    return isinstance(e, OSError) and not self._announced

                async for attempt in retrying("collective_join", until=FOREVER, on=again, wait_initial=1.0,
                                              wait_max=5.0, address=f"{host}:{port}"):
                    with attempt:
                        await c.join(backend, host, port)
        except Exception as e:  # TimeoutError, the store's DistError, CollectiveError: fall back meanwhile
            log.warning("collective_join_failed", error=_short(e), note="announcements go by the fallback until a join works")
        finally:
            self._joining = False
            self._join_done.set()

    async def apply_collective(self, ann: WeightsAnnouncement) -> bool:
        """Receive ``ann``'s tensors by collective and load them, or fall back (logged, with the reason)."""
        c = self.collective
        host: str | None = None
        port = 0
        reason = ""
        try:
            _, host, port = c.target(ann.location)
        except (CollectiveError, ValueError) as e:
            reason = str(e)
        if not reason and self._joining and not c.member:
            # A join under way (at start, or asked by the last announcement) decides how this version
            # comes: by broadcast once it is in (the learner sends what it announces after the join).
            with anyio.move_on_after(c.join_deadline_s):
                await self._join_done.wait()
        if reason:
            pass  # the announced rendezvous itself is unusable: straight to the fallback
        elif not self.cfg.collective.join:
            reason = "rollout.collective.join = false"
        elif not c.member:
            reason = "not in the collective (joining now)"
            self._join_soon(ann.location)
        elif ann.version < c.first_version:
            reason = f"published before this replica joined (it gets v{c.first_version} on)"
        else:
            attributes = {"rlvr.version": ann.version, "rlvr.transport": "collective"}
            with tracer().start_as_current_span("rollout.load_weights", attributes=attributes):
                t0 = time.monotonic()
                # An engine with a place of its own for tensors in host memory (vLLM: shared memory
                # its worker maps, kept by the engine) gets them received there, written once; on a
                # GPU (NCCL) they arrive on the device and the engine takes them from there.
                tensor_block = getattr(self.actor.engine, "tensor_block", None)
                block = tensor_block() if tensor_block is not None and c.device == "cpu" else None
                try:
                    state = await c.receive(ann.version, ann.tensors_sha256, into=block)
                except Exception as e:
                    reason = f"collective failed: {_short(e)}"
                    self._join_soon(ann.location)
                else:
                    return await self._load(ann, t0, time.monotonic(), state=state)
        self.fallbacks += 1
        via = "path" if ann.fallback_path else "object_store"
        log.warning("weights_collective_fallback", version=ann.version, reason=reason, via=via,
                    serving=self.actor.version)
        if ann.fallback_path:
            return await self.apply(msgspec.structs.replace(ann, transport="path", location=ann.fallback_path))
        if host is None:
            log.error("weights_fallback_unavailable", version=ann.version, reason="no learner address to ask")
            return False
        try:
            await c.request_fetch(host, port, ann.version)
        except Exception as e:  # the learner is gone: keep serving; the next announcement gets a fresh try
            log.error("weights_fallback_unavailable", version=ann.version, error=_short(e), serving=self.actor.version)
            return False
        log.info("weights_fallback_requested", version=ann.version)
        return False

    def _join_soon(self, announced: str) -> None:
        if self._tg is not None and not self._joining:
            self._tg.start_soon(self._join, announced)

    async def apply(self, ann: WeightsAnnouncement) -> bool:
        with tracer().start_as_current_span("rollout.load_weights", attributes={"rlvr.version": ann.version}) as span:
            t0 = time.monotonic()
            try:
                directory, files = await self._fetch(ann)
                # Hashing gigabytes must not stall heartbeats and in_progress.
                await anyio.to_thread.run_sync(verify_weight_files, directory, files)
            except (WeightsRejectedError, OSError) as e:
                self.rejected += 1
                log.error("weights_rejected", version=ann.version, reason=str(e), serving=self.actor.version)
                span.set_attribute("rlvr.rejected", str(e))
                return False
            except Exception as e:  # object missing, bus timeout: keep serving the old policy
                self.rejected += 1
                log.error("weights_fetch_failed", version=ann.version, error=repr(e), serving=self.actor.version)
                return False
            return await self._load(ann, t0, time.monotonic(), directory=directory)

    async def _load(
        self, ann: WeightsAnnouncement, t0: float, t1: float, *, directory: Path | None = None,
        state: dict | None = None,
    ) -> bool:
        """Load a fetched folder (``directory``) or received tensors (``state``) into the engine."""
        if self.cfg.reload_policy == "abort_requeue":
            aborted = self.actor.abort_in_flight()
            log.info("aborted_for_reload", tasks=aborted)
        try:
            if state is not None:
                load = getattr(self.actor.engine, "load_state_dict", None)
                if load is None:
                    raise WeightsRejectedError(f"the {type(self.actor.engine).__name__} cannot load tensors in memory")
                await load(state, ann.version)
            else:
                assert directory is not None
                await self._loader(ann.adapter)(directory, ann.version)
        except WeightsRejectedError as e:
            self.rejected += 1
            log.error("weights_rejected", version=ann.version, reason=str(e), serving=self.actor.version)
            return False
        except EngineDeadError:
            raise
        t2 = time.monotonic()
        self.actor.weights_fetch_s = t1 - t0
        self.actor.weights_load_s = t2 - t1
        span = trace.get_current_span()
        span.set_attribute("rlvr.fetch_s", t1 - t0)
        span.set_attribute("rlvr.load_s", t2 - t1)
        # By collective, fetch_s is the broadcast (receive_s) and its sha256 check (digest_s); an engine
        # that times its load in parts (vLLM: queued_s behind the step in progress, reload_s) adds them.
        parts = {} if state is None else {"receive_s": round(self.collective.receive_s, 3),
                                          "digest_s": round(self.collective.digest_s, 3),
                                          **getattr(self.actor.engine, "last_load", {})}
        log.info("weights_loaded", version=ann.version, step=ann.step, transport=ann.transport if state is None else "collective",
                 fetch_s=round(t1 - t0, 3), load_s=round(t2 - t1, 3), **parts)
        if directory is not None:
            self._prune(keep=directory)
        return True

    def _loader(self, adapter: bool):
        """The engine's ``load_adapter`` for an adapter, else its ``load_weights``."""
        engine = self.actor.engine
        if not adapter:
            return engine.load_weights
        load = getattr(engine, "load_adapter", None)
        if load is None:
            raise WeightsRejectedError(f"the {type(engine).__name__} cannot apply LoRA adapters")
        return load

    async def _fetch(self, ann: WeightsAnnouncement) -> tuple[Path, list[WeightFile]]:
        """The local directory holding the blob, and its files named as they are there.

        Object names are ``v<version>/<file>``; the fetched copies are plain
        ``<file>`` under the cache directory, and are checked under that name.
        """
        if ann.transport == "path":
            return Path(ann.location), list(ann.files)
        if ann.transport != "object_store":
            raise WeightsRejectedError(f"transport {ann.transport!r} is not supported by this replica")
        target = self.cache / f"v{ann.version}"
        target.mkdir(parents=True, exist_ok=True)
        store = await self.bus.js.object_store(ann.location)
        local_files = []
        for f in ann.files:
            local = target / Path(f.name).name
            with open(local, "wb") as out:
                await store.get(f.name, writeinto=out)
            local_files.append(WeightFile(local.name, f.sha256, f.bytes))
        return target, local_files

    def _prune(self, keep: Path) -> None:
        if not keep.is_relative_to(self.cache):
            return
        for old in self.cache.glob("v*"):
            if old != keep:
                shutil.rmtree(old, ignore_errors=True)


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."
