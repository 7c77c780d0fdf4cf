"""One learner per run: a lease in the run's KV bucket, renewed with the heartbeat.

Two learners on one run would both train on the same SCORED stream and both
publish weights; their checkpoints would interleave. So the learner takes
the key ``learner-lease`` before it loads its checkpoint, and renews it every
third of ``ttl_s``. Writes are compare-and-set on the key's revision
(``KeyValue.create`` / ``update(last=...)``), so two learners racing for it
cannot both win.

- A free key, or a lease past its expiry, is taken at once.
- A lease whose holder ran on this host under a pid that no longer exists
  (a learner killed and restarted in place) is taken at once too.
- Otherwise the new learner waits, saying whom it waits for, until the lease
  expires or ``wait_s`` passes, then refuses to start (``LeaseHeldError``,
  naming the holder).
- A renewal that finds another holder's revision means this learner lost the
  run (it stalled past the expiry, and another took over): ``LeaseLostError``,
  and the learner stops rather than write a checkpoint or weights.

Not covered: clocks that disagree across hosts by more than ``ttl_s``
(expiry is a wall-clock time written by the holder).
"""

from __future__ import annotations

import os
import socket
import time

import anyio
import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from rlvr.actors.bus import Bus
from rlvr.actors.logs import get_logger
from rlvr.protocol.subjects import KV_LEARNER_LEASE

log = get_logger("rlvr.learner.custody.lease")

LEASE_KEY = KV_LEARNER_LEASE


class LeaseHolder(msgspec.Struct, frozen=True):
    replica: str
    host: str
    pid: int
    out_dir: str
    acquired_at: float
    expires_at: float


class LeaseHeldError(RuntimeError):
    """Another learner holds this run's lease."""


class LeaseLostError(RuntimeError):
    """This learner's lease was taken over by another learner."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LearnerLease:
    def __init__(self, bus: Bus, *, replica: str, out_dir: str, ttl_s: float) -> None:
        self.bus = bus
        self.ttl_s = ttl_s
        self.me = LeaseHolder(replica, socket.gethostname(), os.getpid(), out_dir, time.time(), 0.0)
        self.revision: int | None = None
        self.renewal_failures = 0  # run total of renewals the server could not answer (heartbeat counter)

    def _value(self) -> bytes:
        return msgspec.json.encode(msgspec.structs.replace(self.me, expires_at=time.time() + self.ttl_s))

    def _takeable(self, holder: LeaseHolder) -> bool:
        if holder.expires_at < time.time():
            return True
        same_process = holder.host == self.me.host and holder.pid == self.me.pid
        return same_process or (holder.host == self.me.host and not _pid_alive(holder.pid))

    async def acquire(self, wait_s: float) -> None:
        """Take the lease, waiting at most ``wait_s`` for a live holder's lease to expire."""
        kv = await self.bus.js.key_value(self.bus.names.kv_bucket)
        deadline = time.monotonic() + wait_s
        said = False
        while True:
            try:
                entry = await kv.get(LEASE_KEY)
            except KeyNotFoundError:  # also KeyDeletedError, its subclass
                entry = None
            try:
                if entry is None or entry.value is None:
                    self.revision = await kv.create(LEASE_KEY, self._value())
                    return
                holder = msgspec.json.decode(entry.value, type=LeaseHolder)
                if self._takeable(holder):
                    self.revision = await kv.update(LEASE_KEY, self._value(), last=entry.revision)
                    log.info("lease_taken_over", previous=msgspec.to_builtins(holder))
                    return
            except KeyWrongLastSequenceError:
                continue  # another learner wrote in between: look again
            if time.monotonic() >= deadline:
                raise LeaseHeldError(
                    f"run {self.bus.names.run!r} already has a learner: {holder.replica} (pid {holder.pid} on "
                    f"{holder.host}, out_dir {holder.out_dir}), lease valid for another "
                    f"{holder.expires_at - time.time():.0f}s; stop it first, or start this one after its lease expires"
                )
            if not said:
                log.warning("lease_held", holder=msgspec.to_builtins(holder), waiting_s=round(wait_s, 1))
                said = True
            await anyio.sleep(min(1.0, max(0.05, deadline - time.monotonic())))

    def _mine(self, holder: LeaseHolder) -> bool:
        me = self.me
        return (holder.replica, holder.host, holder.pid, holder.acquired_at) == (
            me.replica, me.host, me.pid, me.acquired_at)

    async def renew(self) -> None:
        """Renew the lease if this learner still holds it: the stored holder is this learner
        (not its revision alone: a bucket deleted and recreated by the topology's repair counts
        revisions from 1 again, and a renewal whose reply was lost has moved it on), written back
        compare-and-set on the revision read. A lease key that is gone (its bucket recreated
        empty, or the key deleted) is held by nobody: it is created again (``create`` fails if
        another learner took it meanwhile). Another holder is ``LeaseLostError``."""
        kv = await self.bus.js.key_value(self.bus.names.kv_bucket)
        for _ in range(3):
            try:
                entry = await kv.get(LEASE_KEY)
            except KeyNotFoundError:  # also KeyDeletedError: nobody's
                entry = None
            try:
                if entry is None or entry.value is None:
                    self.revision = await kv.create(LEASE_KEY, self._value())
                    log.warning("lease_recreated", note="the lease key was gone (its bucket deleted?): taken again")
                    return
                holder = msgspec.json.decode(entry.value, type=LeaseHolder)
                if not self._mine(holder):
                    raise LeaseLostError(
                        f"this learner's lease on run {self.bus.names.run!r} was taken by another learner, "
                        f"{holder.replica} (pid {holder.pid} on {holder.host}, out_dir {holder.out_dir}); it "
                        f"stalled for longer than lease_ttl_s={self.ttl_s:g}s, or the lease was lost with its "
                        "bucket; stopping")
                self.revision = await kv.update(LEASE_KEY, self._value(), last=entry.revision)
                return
            except KeyWrongLastSequenceError:
                continue  # another learner wrote in between: look again
        raise LeaseLostError(f"this learner's lease on run {self.bus.names.run!r} was taken by another learner "
                             "(three renewals lost the compare-and-set); stopping")

    async def keep(self) -> None:
        """Renew every third of the TTL until cancelled. Only a lost lease
        (another learner's revision) is fatal, ``LeaseLostError``: a renewal
        the server cannot answer (a full store, a timeout, a leader election)
        is logged and tried again, and the revision check on the next one
        tells whether another learner took over meanwhile."""
        failures = 0
        while True:
            await anyio.sleep(self.ttl_s / 3)
            try:
                await self.renew()
                failures = 0
            except LeaseLostError:
                raise
            except Exception as e:
                failures += 1
                self.renewal_failures += 1
                log.warning("lease_renewal_failed", error=f"{type(e).__name__}: {e}", failures=failures)


__all__ = ["LEASE_KEY", "LeaseHeldError", "LeaseHolder", "LeaseLostError", "LearnerLease"]
