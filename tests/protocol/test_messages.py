"""Wire messages: round trips, old and new forms, and precise decode errors."""

from __future__ import annotations

import msgspec
import pytest

from rlvr.protocol import (
    ChatMessage,
    Control,
    DeadLetter,
    Heartbeat,
    MessageDecodeError,
    Sample,
    Scored,
    Task,
    UnsupportedVersionError,
    WeightFile,
    WeightsAnnouncement,
    decode,
    encode,
)
from tests.factories import make_sample, make_scored, make_task

EVERY_MESSAGE = [
    make_task(),
    make_task(prompt=[ChatMessage("system", "be brief"), ChatMessage("user", "2+3=")]),  # type: ignore[arg-type]
    make_sample(),
    make_scored(),
    WeightsAnnouncement(run="t", version=3, step=30, transport="object_store", location="rlvr-t-weights",
                        files=[WeightFile("v3/model.safetensors", "ab" * 32, 1234)], dtype="bfloat16",
                        bytes=1234, created_at=1.0, tied_embeddings=True),
    Heartbeat(run="t", role="verify", replica="v0", host="h", pid=1, sent_at=2.0, started_at=1.0,
              counters={"acked": 3.0}, gauges={"latency_p99_s": 0.2}),
    Control(run="t", command="drain", reason="maintenance"),
    DeadLetter(run="t", stage="verify", reason="bad", error_type="X", delivery_count=1, subject="s",
               headers={"Nats-Msg-Id": "a"}, data=b"\x00\xff", replica="v0", created_at=1.0),
]


@pytest.mark.parametrize("msg", EVERY_MESSAGE, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(msg):
    assert decode(encode(msg), type(msg)) == msg


def test_old_form_without_later_fields_decodes_with_defaults():
    # An older producer knew neither `purpose`, `level`, `timings` nor `v`.
    old = msgspec.to_builtins(make_sample())
    for later in ("purpose", "level", "timings", "v", "dataset", "index"):
        old.pop(later, None)
    sample = decode(msgspec.msgpack.encode(old), Sample)
    assert sample.purpose == "train" and sample.v == 1 and sample.level is None


def test_new_form_with_unknown_fields_decodes():
    # A newer producer added a field this code does not know: it is ignored.
    new = msgspec.to_builtins(make_task())
    new["priority"] = 7
    task = decode(msgspec.msgpack.encode(new), Task)
    assert task.task_id == "t-t0" and task.n == 4


def test_newer_major_version_is_a_typed_error():
    raw = msgspec.to_builtins(make_scored())
    raw["v"] = 2
    with pytest.raises(UnsupportedVersionError) as e:
        decode(msgspec.msgpack.encode(raw), Scored)
    assert e.value.kind == "version" and "Scored v2" in e.value.reason


def test_garbage_bytes_are_malformed():
    with pytest.raises(MessageDecodeError) as e:
        decode(b"\xc1\xc1not msgpack", Sample)
    assert e.value.kind == "malformed" and "msgpack" in e.value.reason


def test_wrong_field_type_names_the_path():
    raw = msgspec.to_builtins(make_task())
    raw["sampling"]["temperature"] = "hot"
    with pytest.raises(MessageDecodeError) as e:
        decode(msgspec.msgpack.encode(raw), Task)
    assert e.value.kind == "schema" and "$.sampling.temperature" in e.value.reason


def test_missing_required_field_is_named():
    raw = msgspec.to_builtins(make_sample())
    del raw["group_id"]
    with pytest.raises(MessageDecodeError) as e:
        decode(msgspec.msgpack.encode(raw), Sample)
    assert "group_id" in e.value.reason


def test_a_message_of_another_type_is_rejected_by_its_tag():
    with pytest.raises(MessageDecodeError) as e:
        decode(encode(make_task()), Sample)
    assert e.value.kind == "schema" and "task" in e.value.reason


def test_out_of_range_value_is_rejected():
    raw = msgspec.to_builtins(make_task())
    raw["n"] = 0
    with pytest.raises(MessageDecodeError) as e:
        decode(msgspec.msgpack.encode(raw), Task)
    assert "$.n" in e.value.reason
