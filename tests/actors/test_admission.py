"""Admission decides, without a server, which deliveries reach a handler and why the others do not."""

from __future__ import annotations

import msgspec
import pytest

from rlvr.actors.admission import Admission, MessageRefused, MessageRepublished
from rlvr.protocol import Sample, Task, decode, encode
from rlvr.protocol.samples import sample_meaning
from tests.factories import make_sample, make_task


def _tasks(**kw) -> Admission[Task]:
    return Admission(lambda d: decode(d, Task), unsettled_limit=3, **kw)


def _refused(adm: Admission, data: bytes, **kw) -> MessageRefused:
    with pytest.raises(MessageRefused) as e:
        adm.admit(data, {}, **{"num_delivered": 1, "stream_seq": 1, **kw})
    return e.value


def test_a_good_message_is_admitted_and_its_redelivery_too():
    adm, data = _tasks(), encode(make_task(k=1))
    assert adm.admit(data, {}, num_delivered=1, stream_seq=7).task_id == "t-t1"
    assert adm.admit(data, {}, num_delivered=2, stream_seq=7).task_id == "t-t1"  # the caller knows if it holds it


def test_a_message_delivered_past_the_limit_and_never_given_back_is_a_poison_pill():
    adm, data = _tasks(), encode(make_task(k=1))
    r = _refused(adm, data, num_delivered=4, stream_seq=9)
    assert (r.kind, r.error_type) == ("poison", "PoisonPill") and "delivered 4 times" in r.reason
    adm.given_back(9)  # this consumer nak'ed or held it: redeliveries are its own doing
    assert adm.admit(data, {}, num_delivered=4, stream_seq=9).task_id == "t-t1"


@pytest.mark.parametrize("data, kind", [
    (b"\xc1\xc1 not msgpack", "malformed"),
    (msgspec.msgpack.encode({**msgspec.to_builtins(make_task()), "v": 99}), "version"),
    (encode(make_sample()), "schema"),  # a Sample where a Task is expected
])
def test_bytes_that_do_not_decode_are_refused_with_the_decoder_s_kind(data, kind):
    assert _refused(_tasks(), data).kind == kind


def test_a_decoder_or_validator_that_raises_anything_is_a_refusal_not_a_crash():
    def explode(_: bytes):
        raise ZeroDivisionError("decoder bug")

    assert _refused(Admission(explode, unsettled_limit=3), b"x").kind == "malformed"

    def picky(_: Task) -> None:
        raise KeyError("validator bug")

    assert _refused(_tasks(validate=picky), encode(make_task())).kind == "invalid"


def test_a_value_that_fails_the_family_checks_is_invalid():
    bad = msgspec.structs.replace(make_task(), created_at=float("nan"))
    assert _refused(_tasks(), encode(bad)).kind == "invalid"


def test_the_same_id_with_other_content_is_a_conflict():
    adm = _tasks()
    adm.admit(encode(make_task(k=1, gold="5")), {}, num_delivered=1, stream_seq=1)
    r = _refused(adm, encode(make_task(k=1, gold="6")), stream_seq=2)
    assert r.kind == "conflict" and "'t-t1'" in r.reason


def test_a_copy_with_the_same_meaning_under_another_sequence_is_republished():
    adm: Admission[Sample] = Admission(lambda d: decode(d, Sample), unsettled_limit=3, meaning=sample_meaning)
    adm.admit(encode(make_sample(k=1, text="5")), {}, num_delivered=1, stream_seq=1)
    regenerated = encode(make_sample(k=1, text="a different completion"))  # same slot, other generation
    with pytest.raises(MessageRepublished):
        adm.admit(regenerated, {}, num_delivered=1, stream_seq=2)
    assert _refused(adm, encode(make_sample(k=1, gold="6")), stream_seq=3).kind == "conflict"


def test_without_a_meaning_equal_bytes_at_another_sequence_reach_the_caller():
    adm, data = _tasks(), encode(make_task(k=1))
    adm.admit(data, {}, num_delivered=1, stream_seq=1)
    assert adm.admit(data, {}, num_delivered=1, stream_seq=2).task_id == "t-t1"  # the learner's ledger dedups


def test_memory_is_bounded():
    adm = _tasks(remembered=4)
    for k in range(10):
        adm.admit(encode(make_task(k=k)), {}, num_delivered=1, stream_seq=k)
    assert len(adm._first.items) == 4
    # Forgotten ids are admitted afresh (the server's duplicate window covers the recent past).
    adm.admit(encode(make_task(k=0, gold="9")), {}, num_delivered=1, stream_seq=99)
