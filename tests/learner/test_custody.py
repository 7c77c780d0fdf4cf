"""Custody: every sample the learner receives has one fate, counted once, recorded at the next commit."""

from __future__ import annotations

from rlvr.learner.custody.custody import Custody
from rlvr.learner.custody.groups import Group, filter_group
from tests.factories import make_scored


def _group(k: int, rewards: list[float], *, first_seq: int, version: int = 0) -> Group:
    members = [(first_seq + i, make_scored(k=k, i=i, reward=r, n=len(rewards), version=version))
               for i, r in enumerate(rewards)]
    return Group(members[0][1].sample.group_id, len(rewards), members, first_seen=0.0)


def _receive(c: Custody, group: Group) -> None:
    for seq, sc in group.members:
        assert c.receive(sc.sample_id, seq) == "new"


def _filter(group: Group, version: int = 0):
    return filter_group(group, current_version=version, max_staleness=1, dynamic_sampling=True, zero_variance_eps=0.0)


def test_a_new_sample_is_held_its_redelivery_held_again_and_a_second_copy_acked_and_counted():
    c = Custody()
    assert c.receive("t-t0/0", 10) == "new"
    assert c.receive("t-t0/0", 10) == "held_again"  # the server redelivered the message we hold
    assert c.receive("t-t0/0", 11) == "duplicate"  # published twice: one copy is enough
    assert c.drops.samples["duplicate"] == 1 and c.pending() == 1 and c.held == {"t-t0/0": 10}


def test_training_settles_a_batch_returns_its_messages_and_the_commit_records_it():
    c, g = Custody(), _group(0, [1.0, 0.0], first_seq=5)
    _receive(c, g)
    assert c.filtered(g, _filter(g)) == []  # nothing dropped: both wait for the step
    ids = [sc.sample_id for _, sc in g.members]
    assert sorted(c.train(ids)) == [5, 6]
    assert c.pending() == 0 and c.held == {}
    state, entry = c.commit(step=1)
    assert entry.trained == ids and entry.dropped == {} and state.floor == 7
    # A replay after the commit is already decided; the next entry starts empty.
    assert c.receive(ids[0], 5) == "decided"
    assert c.commit(step=2)[1].trained == []


def test_a_filtered_group_settles_its_drops_by_reason_and_counts_outcomes_and_the_group():
    c, g = Custody(), _group(1, [1.0, 1.0, 1.0, 1.0], first_seq=1)
    _receive(c, g)
    assert sorted(c.filtered(g, _filter(g))) == [1, 2, 3, 4]
    assert c.drops.samples["zero_variance"] == 4 and c.drops.groups["zero_variance"] == 1
    assert c.outcomes["ok"] == 4
    assert set(c.commit(step=0)[1].dropped.values()) == {"zero_variance"}


def test_stale_samples_are_dropped_and_the_rest_of_the_group_kept():
    c = Custody()
    versions, rewards = [5, 5, 5, 1], [1.0, 0.0, 1.0, 0.0]
    g = Group("t-t2", 4, [(1 + i, make_scored(k=2, i=i, reward=r, n=4, version=v))
                          for i, (r, v) in enumerate(zip(rewards, versions))], 0.0)
    _receive(c, g)
    assert c.filtered(g, _filter(g, version=5)) == [4]
    assert c.drops.samples == {"stale": 1} and not c.drops.groups  # the group itself was kept


def test_an_expired_training_group_is_dropped_partial_and_an_eval_group_settled_without_a_fate():
    c, g = Custody(), _group(3, [1.0, 0.0], first_seq=1)
    _receive(c, g)
    assert sorted(c.expire(g)) == [1, 2]
    assert c.drops.samples["partial"] == 2 and c.drops.groups["partial"] == 1 and c.outcomes["ok"] == 2
    ev = _group(4, [1.0, 0.0], first_seq=10)
    ev = Group(ev.group_id, ev.size, [(s, _as_eval(sc)) for s, sc in ev.members], 0.0)
    _receive(c, ev)
    assert sorted(c.expire(ev)) == [10, 11]
    entry = c.commit(step=0)[1]
    assert len(entry.dropped) == 2  # only the training group's ids: eval samples never train
    assert c.outcomes["ok"] == 2  # eval outcomes are the evaluator's


def test_an_invalid_sample_is_dropped_at_once_and_its_message_is_not_released_twice():
    c = Custody()
    c.receive("t-t5/0", 3)
    assert c.drop("t-t5/0", "invalid") == [3]
    assert c.drop("t-t5/0", "invalid") == []  # already settled: nothing left to ack
    assert c.receive("t-t5/0", 3) == "decided"


def test_received_equals_trained_plus_dropped_plus_pending():
    c = Custody()
    groups = [_group(k, [1.0, 0.0] if k % 2 else [1.0, 1.0], first_seq=10 * k + 1) for k in range(6)]
    for g in groups:
        _receive(c, g)
    trained = 0
    for g in groups[:4]:
        result = _filter(g)
        c.filtered(g, result)
        trained += len(c.train([sc.sample_id for _, sc in result.kept]))
    dropped = sum(c.drops.samples.values())
    assert trained + dropped + c.pending() == sum(len(g.members) for g in groups)
    assert c.pending() == 4  # the last two groups are still being assembled


def test_a_restored_custody_knows_what_the_checkpoint_settled():
    c, g = Custody(), _group(0, [1.0, 0.0], first_seq=1)
    _receive(c, g)
    c.train([sc.sample_id for _, sc in g.members])
    state, _ = c.commit(step=1)
    again = Custody.restored(state, dict(c.drops.samples), dict(c.outcomes))
    assert [again.receive(sc.sample_id, s) for s, sc in g.members] == ["decided", "decided"]


def _as_eval(sc):
    import msgspec

    return msgspec.structs.replace(sc, sample=msgspec.structs.replace(sc.sample, purpose="eval"))
