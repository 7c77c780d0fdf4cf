"""nats-py's pull ``fetch``, with messages already delivered taken without a task each.

A pull subscription's ``fetch(batch)`` sends the pull request and then calls
its inbox subscription's ``next_msg`` once per message; each call makes a
task, a uuid and a ``wait_for`` timer, even when the message is already in
the subscription's queue (the server sends a batch in one burst). On a cheap
hop that is about a fifth of the role's CPU per message (bench/bus_hop.py).

``take_queued_at_once(psub)`` wraps that one subscription's ``next_msg``:
a message already queued is returned at once, with the same bookkeeping
``next_msg`` does (pending bytes, ``task_done``); otherwise the library's own
``next_msg`` waits, with its timeout. The pull protocol (requests, expiry,
status messages, heartbeats) stays nats-py's. It relies on two private
attributes of ``nats.aio.subscription.Subscription`` (``_pending_queue``,
``_pending_size``) as of the nats-py version pinned in pyproject.toml; if
they are missing the subscription is left as it is, so a nats-py that
changes them is slower, not wrong (tests/actors/test_nats_fetch.py says
which).
"""

from __future__ import annotations

import asyncio

from nats.aio.msg import Msg


def take_queued_at_once(psub) -> bool:
    """Make ``psub.fetch`` take queued messages without waiting; False when this nats-py cannot."""
    sub = getattr(psub, "_sub", None)
    queue = getattr(sub, "_pending_queue", None)
    if not isinstance(queue, asyncio.Queue) or not isinstance(getattr(sub, "_pending_size", None), int):
        return False
    waiting = sub.next_msg  # the library's: waits, with a timeout

    async def next_msg(timeout: float | None = 1.0) -> Msg:
        if queue.empty() or sub._conn.is_closed:
            return await waiting(timeout)
        msg = queue.get_nowait()
        sub._pending_size -= len(msg.data)
        queue.task_done()
        return msg

    sub.next_msg = next_msg
    return True


__all__ = ["take_queued_at_once"]
