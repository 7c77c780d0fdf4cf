"""The learner's lease survives a server that cannot answer for a while (a
full store, a leader election, a stall): only another learner's revision is
fatal. Against a real nats-server, frozen with SIGSTOP."""

from __future__ import annotations

import os
import signal

import anyio

from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.learner.custody.lease import LearnerLease
from rlvr.protocol import RunNames


def test_renewals_the_server_cannot_answer_are_retried_not_fatal(nats_server):
    async def main():
        bus = await Bus.connect(NatsConfig(url=nats_server.url, request_timeout_s=0.5), BusConfig(),
                                RunNames("lease"), "learn-0")
        await bus.ensure_topology()
        lease = LearnerLease(bus, replica="learn-0", out_dir="/tmp/x", ttl_s=1.5)
        await lease.acquire(wait_s=5)
        first = lease.revision
        async with anyio.create_task_group() as tg:
            tg.start_soon(lease.keep)
            os.kill(nats_server.proc.pid, signal.SIGSTOP)  # renewals time out meanwhile
            try:
                await _until(lambda: lease.renewal_failures >= 2, "two renewals to fail against the frozen server")
            finally:
                os.kill(nats_server.proc.pid, signal.SIGCONT)
            failed = lease.renewal_failures
            await _until(lambda: lease.revision not in (first, None), "a renewal after the server thawed")
            tg.cancel_scope.cancel()  # keep() was still running: no LeaseLostError, no timeout escaped
        await bus.close()
        return first, lease.revision, failed

    first, last, failed = anyio.run(main)
    assert failed >= 2 and last > first


async def _until(condition, what: str, timeout_s: float = 30.0) -> None:
    """Wait for ``condition`` (checked as the lease's own loop moves on), at most ``timeout_s``."""
    with anyio.fail_after(timeout_s):
        while not condition():
            await anyio.sleep(0.05)
