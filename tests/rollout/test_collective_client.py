"""A replica's end of the collective (rollout/collective.py) against a rendezvous that is not there yet."""

from __future__ import annotations

import socket

import anyio
import pytest

from rlvr.rollout.collective import CollectiveClient
from rlvr.rollout.config import RolloutCollectiveConfig


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_join_before_the_learner_listens_is_refused_at_once_without_a_store_client():
    """TCPStore's own client retries a refused connect with a backoff, in C++ that nothing interrupts, and
    to a port of the ephemeral range with nobody behind it can connect to itself and wait out its timeout:
    a replica that joined before the learner listened hung there and could not exit (under `up`). The join
    now asks with one plain connect first, and says at once that nobody listens."""
    client = CollectiveClient(RolloutCollectiveConfig(timeout_s=30), "r")

    async def join() -> None:
        with anyio.fail_after(10):  # before: the store client's retries until its 30 s timeout
            await client.join("gloo", "127.0.0.1", _free_port())

    with pytest.raises(ConnectionRefusedError):
        anyio.run(join)
    assert client.store is None and not client.member
