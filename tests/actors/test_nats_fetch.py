"""``take_queued_at_once``: nats-py's pull fetch, queued messages taken without a task each, on a real server."""

from __future__ import annotations

import time

import anyio
import pytest
from nats.errors import TimeoutError as NatsTimeoutError

from rlvr.actors.nats_fetch import take_queued_at_once
from rlvr.protocol import Sample, decode
from tests.actors.test_consume import RUN, _bus
from tests.factories import make_sample


def test_the_pinned_nats_py_has_the_internals_it_needs(nats_server):
    """If this fails after a nats-py upgrade, pulls still work (the library's
    own path), only slower: update actors/nats_fetch.py for the new internals."""

    async def main():
        bus = await _bus(nats_server.url)
        psub = await bus.js.pull_subscribe_bind(durable="verify", stream=bus.names.stream("ROLLOUTS"))
        ok = take_queued_at_once(psub)
        await bus.close()
        return ok

    assert anyio.run(main) is True


def test_a_burst_arrives_whole_in_stream_order_and_nothing_stays_counted_as_pending(nats_server):
    async def main():
        bus = await _bus(nats_server.url)
        for i in range(50):
            await bus.publish(bus.names.rollouts, make_sample(RUN, k=i), msg_id=f"m{i}")
        psub = await bus.pull_subscription(bus.consumer_def("verify"))  # the shortcut is on
        got = await psub.fetch(batch=64, timeout=2)
        pending = psub._sub.pending_bytes, psub._sub.pending_msgs
        for m in got:
            await m.ack()
        started = time.monotonic()
        with pytest.raises((NatsTimeoutError, TimeoutError)):
            await psub.fetch(batch=8, timeout=0.3)  # nothing left: the library's wait, with its timeout
        waited = time.monotonic() - started
        await bus.close()
        return [decode(m.data, Sample).task_id for m in got], [m.metadata.sequence.stream for m in got], pending, waited

    ids, seqs, pending, waited = anyio.run(main)
    assert ids == [f"{RUN}-t{i}" for i in range(50)]
    assert seqs == sorted(seqs)
    assert pending == (0, 0)
    assert waited < 5
