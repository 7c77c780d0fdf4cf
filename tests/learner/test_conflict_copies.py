"""Conflicting copies of one sample id (two verifier replicas' verdicts, or another prompt under
the same id): the learner keeps one by content, never by arrival, counts the conflict and says
so in its summary. Custody and the group assembler, driven as the learner's ``on_scored`` drives
them, in both orders."""

from __future__ import annotations

import msgspec

from rlvr.learner.custody.custody import Custody, copy_rank
from rlvr.learner.custody.groups import GroupAssembler
from rlvr.protocol import Scored
from rlvr.protocol.samples import scored_msg_id
from tests.factories import make_scored


def _verdict(sc: Scored, reward: float, latency: float = 0.0, replica: str = "") -> Scored:
    v = msgspec.structs.replace(sc.verdict, reward=reward, components={"accuracy": reward}, latency_s=latency)
    return msgspec.structs.replace(sc, verdict=v, replica=replica)


def _other_gold(sc: Scored) -> Scored:
    """The same sample id, another task behind it (another gold): other work, not a copy."""
    spec = msgspec.structs.replace(sc.sample.verifier, params={"gold": "6"})
    return msgspec.structs.replace(sc, sample=msgspec.structs.replace(sc.sample, verifier=spec))


class _Learner:
    """Custody and the assembler, wired as ``LearnActor.on_scored`` wires them."""

    def __init__(self) -> None:
        self.custody = Custody()
        self.assembler = GroupAssembler(group_timeout_s=600.0)
        self.groups: list = []
        self.dead: list[tuple[int, str]] = []  # (seq, reason) dead-lettered as conflicts
        self.acked: list[int] = []

    def on_scored(self, seq: int, sc: Scored) -> str:
        rank = copy_rank(sc)
        receipt = self.custody.receive(sc.sample_id, seq, rank=rank)
        if receipt in ("decided", "duplicate"):
            self.acked.append(seq)
            return "ack"
        if receipt == "held_again":
            return "hold"
        if receipt == "conflict":
            aside, why, dead = self.custody.conflict(sc.sample_id, seq, rank,
                                                     lambda: self.assembler.replace(seq, sc))
            (self.dead.append((aside, why)) if dead else self.acked.append(aside))
            return "aside" if aside == seq else "hold"
        if (g := self.assembler.add(seq, sc, now=0.0)) is not None:
            self.groups.append(g)
        return "hold"


def _run(order: list[tuple[int, Scored]]) -> _Learner:
    learner = _Learner()
    for seq, sc in order:
        learner.on_scored(seq, sc)
    return learner


def _kept(learner: _Learner) -> dict[str, Scored]:
    (group,) = learner.groups
    return {sc.sample_id: sc for _, sc in group.members}


def test_two_verdicts_of_one_sample_keep_the_same_copy_in_both_orders():
    members = [make_scored(k=1, i=i, reward=float(i % 2), n=3) for i in range(3)]
    right, wrong = _verdict(members[0], 1.0, replica="verify-0"), _verdict(members[0], 0.0, replica="verify-1")
    low, high = sorted([right, wrong], key=copy_rank)
    rest = [(3, members[1]), (4, members[2])]

    first = _run([(1, high), (2, low), *rest])  # the copy that loses arrives first
    second = _run([(1, low), (2, high), *rest])  # and last
    for learner in (first, second):
        kept = _kept(learner)[members[0].sample_id]
        assert kept == low  # by content, not by arrival
        assert learner.custody.conflicts == 1
        assert learner.custody.pending() == 3  # one sample, one fate: the copy put aside is no sample
        assert learner.custody.accounting(0)["copies"] == 1
    # A copy of the same slot with another verdict is acked, not dead-lettered.
    assert first.acked == [1] and second.acked == [2] and not first.dead and not second.dead
    # The copy held is the one kept: its seq is what custody will release.
    assert first.custody.held[members[0].sample_id] == 2 and second.custody.held[members[0].sample_id] == 1


def test_the_same_verdict_scored_twice_is_a_duplicate_not_a_conflict():
    sc = make_scored(k=2, i=0, n=2)
    learner = _run([(1, _verdict(sc, 1.0, latency=0.01, replica="verify-0")),
                    (2, _verdict(sc, 1.0, latency=0.9, replica="verify-1"))])
    assert learner.custody.conflicts == 0 and learner.custody.drops.samples["duplicate"] == 1
    assert copy_rank(_verdict(sc, 1.0, latency=0.01, replica="a")) == copy_rank(_verdict(sc, 1.0, 0.9, "b"))


def test_another_task_under_the_same_id_is_dead_lettered_whichever_comes_first():
    members = [make_scored(k=3, i=i, reward=float(i % 2), n=2) for i in range(2)]
    a, b = members[0], _other_gold(members[0])
    low, high = sorted([a, b], key=copy_rank)
    for order in ([(1, high), (2, low)], [(1, low), (2, high)]):
        learner = _run([*order, (3, members[1])])
        assert _kept(learner)[a.sample_id] == low
        (aside_seq, reason), = learner.dead
        assert dict(order)[aside_seq] == high
        assert "already received with other content" in reason and "lower digest" in reason
        assert learner.custody.conflicts == 1


def test_a_conflicting_copy_after_its_group_went_to_a_step_is_put_aside_and_says_why():
    members = [make_scored(k=4, i=i, reward=float(i % 2), n=2) for i in range(2)]
    right, wrong = _verdict(members[0], 1.0), _verdict(members[0], 0.0)
    low, high = sorted([right, wrong], key=copy_rank)
    learner = _run([(1, high), (2, members[1])])  # the group completes with the copy that ranks higher
    assert learner.on_scored(3, low) == "aside"
    assert _kept(learner)[members[0].sample_id] == high  # what went to a step stands
    assert learner.custody.conflicts == 1 and learner.acked == [3]


def test_a_copy_of_a_sample_already_trained_is_a_late_duplicate():
    members = [make_scored(k=5, i=i, reward=float(i % 2), n=2) for i in range(2)]
    learner = _run([(1, members[0]), (2, members[1])])
    learner.custody.train([m.sample_id for m in members])
    assert learner.on_scored(3, _verdict(members[0], 0.5)) == "ack"
    assert learner.custody.late_duplicates == 1 and learner.custody.conflicts == 0


def test_the_rank_puts_the_meaning_first():
    sc = make_scored(k=6, i=0, n=2)
    r1, r2 = copy_rank(_verdict(sc, 1.0)), copy_rank(_verdict(sc, 0.0))
    assert r1[:8] == r2[:8] and r1 != r2  # one slot, two verdicts
    assert copy_rank(_other_gold(sc))[:8] != r1[:8]


def test_two_verdicts_of_one_sample_go_to_scored_under_two_ids_one_verdict_under_one():
    """Two verifier replicas that scored one sample differently publish under two ``Nats-Msg-Id``s
    (SCORED's duplicate window keeps both, so arrival at the server decides nothing); the same
    verdict scored again, another latency or replica aside, is one id (stored once)."""
    sc = make_scored(k=7, i=0, n=2)
    right, wrong = _verdict(sc, 1.0, latency=0.1, replica="verify-0"), _verdict(sc, 0.0, replica="verify-1")
    again = _verdict(sc, 1.0, latency=2.5, replica="verify-1")
    assert scored_msg_id(right.sample, right.verdict) != scored_msg_id(wrong.sample, wrong.verdict)
    assert scored_msg_id(right.sample, right.verdict) == scored_msg_id(again.sample, again.verdict)
    assert scored_msg_id(sc.sample, sc.verdict).startswith(scored_msg_id(sc.sample) + ".")
