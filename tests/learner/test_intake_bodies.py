"""The learner's intake of referenced groups (learner/intake.py) on a real nats-server: a body is read
and validated before custody, a refused one is a Term naming the field, and after a commit only the
bodies of messages below the floor go, never one another message above it still names, nor one a
dead letter names."""

from __future__ import annotations

import anyio

from rlvr.actors.bodies import store_body
from rlvr.actors.consume import Term
from rlvr.learner.intake import ScoredIntake
from rlvr.protocol import ScoredGroup
from rlvr.protocol.groups import BodyRef
from tests.actors.bodies_helpers import long_group, owner_bus, scored, stored_bodies

RUN = "intake"


def _referenced(group, ref: BodyRef) -> ScoredGroup:
    whole = scored(group)
    return ScoredGroup(whole.run, whole.task_id, [], whole.verdicts, whole.replica, body=ref)


def test_a_referenced_group_is_read_before_custody_and_a_refused_one_is_a_term(nats_server):
    async def go():
        bus = await owner_bus(nats_server.url, RUN)
        try:
            intake = ScoredIntake(bus)
            group = long_group(RUN, f"{RUN}-a", [200_000, 10])
            ref = await store_body(bus, group)
            assert await intake.admit(_referenced(group, ref), 7) == scored(group)
            assert intake.named == {7: ref.name}
            other = long_group(RUN, f"{RUN}-b", [10, 10])  # names task a's body: refused, never named
            out = await intake.admit(_referenced(other, ref), 8)
            assert isinstance(out, Term) and out.kind == "invalid" and out.reason.startswith("body.name")
            assert intake.named == {7: ref.name}
        finally:
            await bus.close()

    anyio.run(go)


def test_after_a_commit_only_bodies_named_below_the_floor_alone_are_deleted(nats_server):
    async def go():
        bus = await owner_bus(nats_server.url, RUN)
        try:
            intake = ScoredIntake(bus)
            groups = {k: long_group(RUN, f"{RUN}-{k}", [50_000, 10]) for k in "abc"}
            refs = {k: await store_body(bus, g) for k, g in groups.items()}
            for seq, k in ((1, "a"), (2, "b"), (3, "a"), (4, "c")):  # seq 3: another copy of a's group
                await intake.admit(_referenced(groups[k], refs[k]), seq)
            intake.dead(4)  # dead-lettered: its body stays with the letter
            await intake.committed(3)
            assert set(await stored_bodies(bus)) == {refs["a"].name, refs["c"].name}  # a: seq 3 still names it
            await intake.committed(5)
            assert set(await stored_bodies(bus)) == {refs["c"].name}
            assert intake.named == {}
        finally:
            await bus.close()

    anyio.run(go)
