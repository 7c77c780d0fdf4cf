"""The learner's lease when the run's KV bucket is deleted (repair without an operator): the
owner recreates the bucket empty (``topology.repair``) and the learner takes its lease again,
instead of reading the missing key as another learner's; a key another learner created in
the meantime is still a lost lease. Real nats-server."""

from __future__ import annotations

import anyio
import pytest

from rlvr.actors import topology
from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.learner.custody.lease import LEASE_KEY, LearnerLease, LeaseLostError
from rlvr.protocol import RunNames


async def _held(url: str, run: str) -> tuple[Bus, LearnerLease]:
    bus = await Bus.connect(NatsConfig(url=url), BusConfig(), RunNames(run), "learn-0")
    await bus.ensure_topology()
    lease = LearnerLease(bus, replica="learn-0", out_dir="/tmp/x", ttl_s=3.0)
    await lease.acquire(wait_s=5)
    return bus, lease


def test_a_deleted_kv_bucket_is_recreated_and_the_lease_taken_again(nats_server):
    async def main():
        bus, lease = await _held(nats_server.url, "lsa")
        await bus.js.delete_key_value(bus.names.kv_bucket)
        assert bus.names.kv_bucket in await topology.repair(bus)  # the owner's next repair pass
        await lease.renew()
        entry = await (await bus.js.key_value(bus.names.kv_bucket)).get(LEASE_KEY)
        await bus.close()
        return entry.revision, lease.revision, entry.value

    stored, held, value = anyio.run(main)
    assert stored == held and b"learn-0" in value


def test_a_lease_key_another_learner_created_meanwhile_is_still_lost(nats_server):
    async def main():
        bus, lease = await _held(nats_server.url, "lsb")
        await bus.js.delete_key_value(bus.names.kv_bucket)
        await topology.repair(bus)
        other = LearnerLease(bus, replica="learn-1", out_dir="/tmp/y", ttl_s=3.0)
        await other.acquire(wait_s=5)  # the key was gone: learn-1 took it first
        with pytest.raises(LeaseLostError, match="taken by another learner"):
            await lease.renew()
        await bus.close()

    anyio.run(main)


def test_the_owners_kv_put_recreates_a_deleted_bucket_first(nats_server):
    """The learner's checkpoint writes its progress to KV: a bucket deleted since is recreated
    by the put (the owner's repair), never an exception that takes the learner down."""
    async def main():
        bus, lease = await _held(nats_server.url, "lsc")
        await bus.js.delete_key_value(bus.names.kv_bucket)
        await bus.kv_put("learner-progress", b"{}")
        entry = await (await bus.js.key_value(bus.names.kv_bucket)).get("learner-progress")
        await lease.renew()
        await bus.close()
        return entry.value

    assert anyio.run(main) == b"{}"
