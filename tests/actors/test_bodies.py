"""Groups larger than a message (actors/bodies.py) on a real nats-server: the size is checked against
the server's own max_payload (a server of 1 MB here, to keep the groups small), a group past half of
it goes by reference and reads back equal and validated, a stored reference is published without
writing, every hostile reference is refused naming the field, a group past bus.max_group_bytes is
refused naming the key, and deleted bodies are gone."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from rlvr.actors.bodies import (BodyRefusedError, GroupTooLargeError, delete_bodies, message_room, publish_group,
                                resolve, store_body)
from rlvr.cli.natsserver import NatsServer
from rlvr.protocol import SampleGroup, ScoredGroup, decode, encode
from rlvr.protocol.groups import body_name
from rlvr.protocol.validate import MessageInvalidError
from tests.actors.bodies_helpers import hostile_references, long_group, owner_bus, scored, stored_bodies

RUN = "bodies"
# At 1 MB: ~10 bytes a token, so 60k tokens are over half a message, 20k tokens under it.
BIG, SMALL = 60_000, 20_000


@pytest.fixture
def small_server(tmp_path: Path):
    with NatsServer(tmp_path / "nats", max_payload="1MB") as server:
        yield server


def _last(bus, kind: str, typ):
    async def go():
        raw = await bus.js.get_last_msg(bus.names.stream(kind), getattr(bus.names, kind.lower()))
        return decode(raw.data, typ)

    return go()


def test_a_group_goes_inline_while_it_fits_half_a_message_and_by_reference_past_it(small_server):
    async def go():
        bus = await owner_bus(small_server.url, RUN)
        try:
            assert bus.nc.max_payload == 1 << 20  # the server's real limit, from its INFO
            small = long_group(RUN, f"{RUN}-small", [SMALL, 10])
            assert len(encode(small)) < message_room(bus) // 2
            await publish_group(bus, bus.names.rollouts, small, small.msg_id)
            assert await _last(bus, "ROLLOUTS", SampleGroup) == small  # inline, as before

            big = long_group(RUN, f"{RUN}-big", [BIG, 10])
            assert message_room(bus) // 2 < len(encode(big)) < message_room(bus)  # would fit, but not its verdicts
            await publish_group(bus, bus.names.rollouts, big, big.msg_id)
            sent = await _last(bus, "ROLLOUTS", SampleGroup)
            assert sent.samples == [] and sent.body is not None
            assert sent.body.name == body_name(big.task_id, sent.body.sha256)
            assert (await stored_bodies(bus)) == {sent.body.name: sent.body.size}
            assert await resolve(bus, sent) == big  # read back equal, validated, its body field None

            # Its ScoredGroup (the same size and a verdict each) fits a whole message: inline.
            whole = scored(big)
            await publish_group(bus, bus.names.scored, whole, "scored-big")
            assert await _last(bus, "SCORED", ScoredGroup) == whole
        finally:
            await bus.close()

    anyio.run(go)


def test_a_verifier_s_scored_group_refers_to_its_input_s_body_and_writes_nothing(small_server):
    async def go():
        bus = await owner_bus(small_server.url, RUN)
        try:
            big = long_group(RUN, f"{RUN}-big", [BIG, BIG])
            ref = await store_body(bus, big)
            before = await stored_bodies(bus)
            await publish_group(bus, bus.names.scored, scored(big), "scored-big", stored=ref)
            sent = await _last(bus, "SCORED", ScoredGroup)
            assert sent.samples == [] and sent.body == ref and len(sent.verdicts) == 2
            assert await stored_bodies(bus) == before  # nothing uploaded again
            assert await resolve(bus, sent) == scored(big)
            # The same group stored again is not written twice: its name is its digest.
            assert await store_body(bus, big) == ref and await stored_bodies(bus) == before
        finally:
            await bus.close()

    anyio.run(go)


def test_an_inline_scored_group_past_the_message_is_refused_and_the_verifier_writes_no_body(small_server):
    async def go():
        bus = await owner_bus(small_server.url, RUN)
        try:
            big = long_group(RUN, f"{RUN}-big", [BIG, BIG])  # only a rollout's reference could carry it
            with pytest.raises(GroupTooLargeError, match="never writes a body"):
                await publish_group(bus, bus.names.scored, scored(big), "scored-big")
            assert await stored_bodies(bus) == {}
        finally:
            await bus.close()

    anyio.run(go)


def test_a_group_past_max_group_bytes_is_refused_naming_the_key(small_server):
    async def go():
        bus = await owner_bus(small_server.url, RUN, max_group_bytes=1 << 20)
        try:
            huge = long_group(RUN, f"{RUN}-huge", [BIG, BIG])  # ~1.2 MB of samples
            with pytest.raises(GroupTooLargeError, match=r"more than bus.max_group_bytes = 1048576"):
                await publish_group(bus, bus.names.rollouts, huge, huge.msg_id)
            assert await stored_bodies(bus) == {} and (await bus.js.stream_info(bus.names.stream("ROLLOUTS"))).state.messages == 0
        finally:
            await bus.close()

    anyio.run(go)


@pytest.mark.parametrize("case", hostile_references(RUN), ids=lambda c: c.__name__)
def test_a_hostile_reference_is_refused_naming_the_field(small_server, case):
    async def go():
        bus, other = await owner_bus(small_server.url, RUN), await owner_bus(small_server.url, "otherrun")
        try:
            group, field = await case(bus, other, f"{RUN}-t")
            for message in (group, ScoredGroup(group.run, group.task_id, [], scored(long_group(RUN, "x", [1])).verdicts,
                                               body=group.body)):
                with pytest.raises((BodyRefusedError, MessageInvalidError)) as e:
                    await resolve(bus, message)
                assert e.value.reason.startswith(field), e.value.reason
        finally:
            await bus.close()
            await other.close()

    anyio.run(go)


def test_deleted_bodies_are_gone_and_deleting_again_is_harmless(small_server):
    async def go():
        bus = await owner_bus(small_server.url, RUN)
        try:
            a = await store_body(bus, long_group(RUN, f"{RUN}-a", [BIG]))
            b = await store_body(bus, long_group(RUN, f"{RUN}-b", [BIG]))
            assert await delete_bodies(bus, [a.name]) == 1
            assert set(await stored_bodies(bus)) == {b.name}
            assert await delete_bodies(bus, [a.name]) == 0
            with pytest.raises(BodyRefusedError, match="names no object"):
                await resolve(bus, SampleGroup(RUN, f"{RUN}-a", [], body=a))
        finally:
            await bus.close()

    anyio.run(go)
