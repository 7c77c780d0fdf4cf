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
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from nats.js import api as js_api

from rlvr.actors.bus import Bus
from rlvr.actors.logs import get_logger
from rlvr.actors.tracing import tracer
from rlvr.protocol import MessageDecodeError, MessageInvalidError, WeightFile, WeightsAnnouncement, check_message, decode
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

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        sub = await self.bus.js.subscribe(
            self.bus.names.weights,
            ordered_consumer=True,
            deliver_policy=js_api.DeliverPolicy.LAST_PER_SUBJECT,
        )
        task_status.started()
        try:
            async for msg in sub.messages:
                try:
                    ann = decode(msg.data, WeightsAnnouncement)
                    check_message(ann)
                except (MessageDecodeError, MessageInvalidError) as e:
                    log.error("weights_announcement_invalid", reason=e.reason)
                    continue
                if ann.version <= self.actor.version:
                    continue
                await self.apply(ann)
        finally:
            with anyio.CancelScope(shield=True):
                await sub.unsubscribe()

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
            t1 = time.monotonic()
            if self.cfg.reload_policy == "abort_requeue":
                aborted = self.actor.abort_in_flight()
                log.info("aborted_for_reload", tasks=aborted)
            try:
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
            span.set_attribute("rlvr.fetch_s", t1 - t0)
            span.set_attribute("rlvr.load_s", t2 - t1)
            log.info("weights_loaded", version=ann.version, step=ann.step, fetch_s=round(t1 - t0, 3), load_s=round(t2 - t1, 3))
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
