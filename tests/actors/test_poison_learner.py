"""Poison on SCORED, through the learner's consume path, on a real nats-server.

The learner actor is being restructured, so this drives the path it is made
of rather than the actor: a ``Consumer`` on the ``learn`` durable (the
consume loop, its validation and dead letters) whose handler assembles
groups and filters them exactly as the learner does (``learner/custody/groups.py``).
Validation is what the learner wires in: ``check_message`` plus
``check_token_ids_in_vocab`` against its model's vocabulary.

Each case publishes one poison group message (a ScoredGroup with one hostile
member or verdict, protocol/groups.py) and then a good group: the poison is
dead-lettered with its reason naming the member and counted, the handler never
sees it, and the good group still reaches the filters with both samples kept.
"""

from __future__ import annotations

import anyio
import pytest

from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.actors.consume import Consumer, Delivery
from rlvr.learner.custody.groups import GroupAssembler, filter_group
from rlvr.protocol import (DeadLetter, MessageInvalidError, RunNames, ScoredGroup, check_message,
                           check_token_ids_in_vocab, decode, encode)
from tests.actors.deadwatch import DeadLetterWatch
from tests.actors.test_poison import BUS, MAX_PAYLOAD, server, scored_poisons  # noqa: F401 (fixture)
from tests.busclient import BusClient
from tests.factories import make_scored_group

RUN = "pl"
VOCAB = 64
SCORED_CASES = scored_poisons(RUN, 1, VOCAB, MAX_PAYLOAD)


def learner_validate(group: ScoredGroup) -> None:
    """What the learner checks before a group's samples reach custody: ``check_message`` (the consumer's
    validation) and each member's ids against its vocabulary, naming the member (``LearnActor._out_of_vocab``)."""
    check_message(group)
    for i, sc in enumerate(group.items()):
        try:
            check_token_ids_in_vocab(sc, VOCAB)
        except MessageInvalidError as e:
            raise MessageInvalidError(f"samples[{i}].{e.reason}") from None


@pytest.mark.parametrize("case", SCORED_CASES, ids=[c.name for c in SCORED_CASES])
def test_learner_path_dead_letters_a_poison_scored_group_counts_it_and_trains_the_next_group(server, case):  # noqa: F811
    k = 100 + SCORED_CASES.index(case)
    handled: list[str] = []
    kept: list[str] = []

    async def main():
        bus = await Bus.connect(NatsConfig(url=server.url), BusConfig(**BUS), RunNames(RUN), "learn-test")
        await bus.ensure_topology()
        assembler = GroupAssembler(group_timeout_s=600)
        group_kept, dead = anyio.Event(), DeadLetterWatch(bus)

        async def on_scored(message: ScoredGroup, delivery: Delivery) -> None:
            for scored in message.items():
                handled.append(scored.sample_id)
                group = assembler.add(delivery.stream_seq, scored)
                if group is not None:
                    result = filter_group(group, current_version=0, max_staleness=1, dynamic_sampling=True,
                                          zero_variance_eps=1e-6)
                    kept.extend(sc.sample_id for _, sc in result.kept)
                    if group.group_id == f"{RUN}-t{k}":
                        group_kept.set()  # the drain then waits for its ack

        consumer = Consumer(bus, bus.consumer_def("learn"), stage="learn", decode=lambda d: decode(d, ScoredGroup),
                            handle=on_scored, concurrency=16, validate=learner_validate)
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            await tg.start(consumer.run, stop)
            if case.first is not None:
                await bus.js.publish(bus.names.scored, case.first, headers={"Nats-Msg-Id": f"{case.name}-first"})
            if case.msg_id:
                await bus.js.publish(bus.names.scored, case.data, headers={"Nats-Msg-Id": case.name})
            else:
                await bus.js.publish(bus.names.scored, case.data)
            good = make_scored_group(RUN, k=k, rewards=[1.0, 0.0])
            await bus.js.publish(bus.names.scored, encode(good), headers={"Nats-Msg-Id": good.task_id})
            with anyio.fail_after(30):
                await group_kept.wait()
                await dead.until(lambda w: w.stored >= 1)  # the drain waits for its term and count
            stop.set()
        await bus.close()
        return consumer.stats.counters

    counters = anyio.run(main)
    # The conflict case's valid first copy is a whole group too: kept as well.
    first = [f"{RUN}-t1/0", f"{RUN}-t1/1"] if case.first is not None else []
    assert kept == [*first, f"{RUN}-t{k}/0", f"{RUN}-t{k}/1"]
    assert counters["dead_lettered"] == 1 and counters[f"dead_letter.{case.kind}"] == 1
    assert set(handled) == set(kept)  # the poison never reached the handler
    letters = BusClient(server.url, RUN).decoded("DEAD", DeadLetter)
    if case.msg_id:
        (letter,) = [d for d in letters if d.headers.get("Nats-Msg-Id") == case.name]
    else:
        (letter,) = [d for d in letters if d.size == len(case.data) and d.reference]
    assert letter.kind == case.kind and case.reason in letter.reason and letter.stage == "learn"
