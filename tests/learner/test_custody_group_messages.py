"""Custody when one message carries a whole group (protocol/groups.py): its samples share one stream
seq, and the message is acked only once every one of them is settled."""

from __future__ import annotations

from rlvr.learner.custody.custody import Custody
from rlvr.learner.custody.groups import Group, filter_group
from tests.factories import make_scored


def _one_message(k: int, rewards: list[float], seq: int) -> Group:
    members = [(seq, make_scored(k=k, i=i, reward=r, n=len(rewards))) for i, r in enumerate(rewards)]
    return Group(members[0][1].sample.group_id, len(rewards), members, first_seen=0.0)


def test_a_group_message_is_released_only_when_its_last_sample_is_settled():
    c, g = Custody(), _one_message(0, [1.0, 0.0, 1.0, 0.0], seq=7)
    for seq, sc in g.members:
        assert c.receive(sc.sample_id, seq) == "new"
    ids = [sc.sample_id for _, sc in g.members]
    assert c.train(ids[:3]) == []  # one sample of the message is still held
    assert c.drop(ids[3], "stale") == [7]
    state, entry = c.commit(step=1)
    assert state.floor == 8 and sorted(entry.trained) == sorted(ids[:3]) and entry.dropped == {ids[3]: "stale"}


def test_a_filtered_group_message_with_drops_and_kept_samples_waits_for_the_step():
    c, g = Custody(), _one_message(1, [1.0, 0.0, 1.0, 0.0], seq=3)
    for seq, sc in g.members:
        c.receive(sc.sample_id, seq)
    result = filter_group(g, current_version=0, max_staleness=1, dynamic_sampling=True, zero_variance_eps=0.0)
    assert c.filtered(g, result) == []  # nothing dropped: all four wait
    assert c.train([sc.sample_id for _, sc in result.kept]) == [3]
    assert c.pending() == 0


def test_a_redelivered_group_message_is_held_again_for_every_member():
    c, g = Custody(), _one_message(2, [1.0, 0.0], seq=4)
    assert [c.receive(sc.sample_id, 4) for _, sc in g.members] == ["new", "new"]
    assert [c.receive(sc.sample_id, 4) for _, sc in g.members] == ["held_again", "held_again"]
    assert c.train([sc.sample_id for _, sc in g.members]) == [4]


def test_a_conflicting_copy_that_replaces_a_member_releases_the_old_message_only_with_its_last_member():
    c, g = Custody(), _one_message(3, [1.0, 0.0], seq=10)
    for _, sc in g.members:
        c.receive(sc.sample_id, 10, rank=b"\x00" * 8 + b"\x09")
    asides = []
    for _, sc in g.members:
        assert c.receive(sc.sample_id, 20, rank=b"\x00" * 8 + b"\x01") == "conflict"
        asides.append(c.conflict(sc.sample_id, 20, b"\x00" * 8 + b"\x01", lambda: 10)[0])
    assert asides == [None, 10]  # the old message is released once nothing of it is held
    assert c.train([sc.sample_id for _, sc in g.members]) == [20]
