"""The collective wire (rlvr.actors.collective) between two ranks in one process (gloo, threads).

Bit-equal for every dtype the learner exports (bf16 included), and bounded: a group whose
peer never comes fails within its timeout instead of hanging.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from rlvr.actors import collective as wire


def _store():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return port, wire.open_store("127.0.0.1", port, master=True, timeout_s=10)


def test_a_state_dict_crosses_bit_equal_with_its_digest():
    import torch

    port, master = _store()
    g = torch.Generator().manual_seed(0)
    state = {
        "a.weight": torch.randn(7, 5, generator=g),
        "b.bf16": torch.randn(3, 4, generator=g).to(torch.bfloat16),
        "c.half": torch.randn(9, generator=g).to(torch.float16),
        "d.scalar": torch.tensor(3.5),
        "e.empty": torch.empty(0, 4),
    }
    header = wire.header_for(7, state)
    got: dict = {}

    def rank1() -> None:
        client = wire.open_store("127.0.0.1", port, master=False, timeout_s=10)
        pg = wire.new_group(client, 1, 1, "gloo", 10)
        got["first"] = wire.recv_first_version(pg, "cpu", 10)
        got["header"], got["state"] = wire.recv_state(pg, "cpu", 10)

    t = threading.Thread(target=rank1)
    t.start()
    pg = wire.new_group(master, 1, 0, "gloo", 10)
    wire.send_first_version(pg, 7, "cpu", 10)
    wire.send_state(pg, header, state, "cpu", 10)
    t.join(30)
    assert got["first"] == 7 and got["header"] == header
    for name, tensor in state.items():
        r = got["state"][name]
        assert r.dtype == tensor.dtype and r.shape == tensor.shape
        assert torch.equal(r.reshape(-1).view(torch.uint8), tensor.reshape(-1).view(torch.uint8))
    assert wire.tensors_sha256(got["state"].items()) == header.sha256
    flipped = dict(state, **{"a.weight": state["a.weight"].clone()})
    flipped["a.weight"].view(torch.int32)[0, 0] ^= 1  # one bit
    assert wire.tensors_sha256(flipped.items()) != header.sha256


def test_a_group_whose_peer_never_comes_fails_within_its_timeout():
    _, master = _store()
    t0 = time.monotonic()
    with pytest.raises(RuntimeError):  # gloo's own timeout (DistError and DistStoreError are RuntimeErrors)
        wire.new_group(master, 5, 0, "gloo", 1.0)
    assert time.monotonic() - t0 < 10


def test_locations_and_addresses_name_what_is_wrong():
    assert wire.parse_location("gloo://10.0.0.1:29600") == ("gloo", "10.0.0.1", 29600)
    assert wire.parse_address("[::1]:5", "k") == ("::1", 5)
    with pytest.raises(ValueError, match="learn.collective.address"):
        wire.parse_address("learner", "learn.collective.address")
    with pytest.raises(wire.CollectiveError, match="nccl\\|gloo"):
        wire.parse_location("tcp://h:1")


@pytest.mark.gpu
def test_nccl_between_two_gpus():
    """Only on a machine with two CUDA devices (NCCL refuses two ranks on one device)."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    port, master = _store()
    state = {"w": torch.randn(1024, 1024).to(torch.bfloat16)}
    header = wire.header_for(1, state)
    got: dict = {}

    def rank1() -> None:
        torch.cuda.set_device(1)
        client = wire.open_store("127.0.0.1", port, master=False, timeout_s=60)
        pg = wire.new_group(client, 1, 1, "nccl", 60)
        got["first"] = wire.recv_first_version(pg, "cuda:1", 60)
        got["header"], got["state"] = wire.recv_state(pg, "cuda:1", 60)

    t = threading.Thread(target=rank1)
    t.start()
    torch.cuda.set_device(0)
    pg = wire.new_group(master, 1, 0, "nccl", 60)
    wire.send_first_version(pg, 1, "cuda:0", 60)
    wire.send_state(pg, header, state, "cuda:0", 60)
    t.join(120)
    assert got["first"] == 1
    assert wire.tensors_sha256(got["state"].items()) == header.sha256
