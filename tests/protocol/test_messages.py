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
from rlvr.protocol import Completion, EnvSpec, Episode, Turn
from rlvr.protocol.validate import MessageInvalidError, check_sample
from tests.factories import make_sample, make_scored, make_task


def make_episode_sample() -> Sample:
    """A two-turn episode: the policy's 2 tokens, the environment's 3, the policy's 2."""
    s = make_sample(n=4)
    return msgspec.structs.replace(
        s, completion=Completion([5, 6, 7, 8, 9, 10, 11], [-0.1, -0.2, 0.0, 0.0, 0.0, -0.3, -0.4], [1, 1, 0, 0, 0, 1, 1]),
        policy_version=2, policy_version_max=3,
        episode=Episode("calc", [Turn(0, 2, 2), Turn(5, 7, 3)], "done", turn_rewards=[0.0, 1.0], env_reward=1.0,
                        tool_calls={"calculator": 1}, transcript=[["user", "2+3="], ["assistant", "="]]),
    )

EVERY_MESSAGE = [
    make_task(),
    make_task(prompt=[ChatMessage("system", "be brief"), ChatMessage("user", "2+3=")]),  # type: ignore[arg-type]
    make_sample(),
    make_scored(),
    make_task(env=EnvSpec("tools", {"tools": ["python"]}, max_turns=3), record={"extra_info": {"index": 7}}),
    make_episode_sample(),
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


def test_a_single_turn_sample_of_before_episodes_decodes_as_an_episode_of_one_turn():
    old = msgspec.to_builtins(make_sample())
    old["completion"] = old["completion"][:2]  # an array_like Completion of ids and log-probs only
    for later in ("episode", "prompt", "record"):
        old.pop(later, None)
    sample = decode(msgspec.msgpack.encode(old), Sample)
    assert sample.completion.mask == [] and sample.episode is None
    assert sample.completion.policy_tokens() == len(sample.completion.ids)


def test_an_episode_of_before_info_decodes_and_one_with_info_round_trips():
    new = make_episode_sample()
    new = msgspec.structs.replace(new, episode=msgspec.structs.replace(new.episode, info=[{}, {"asked": True}]))
    old = msgspec.to_builtins(new)
    del old["episode"]["info"]  # a rollout of before StepResult.info was recorded
    assert decode(msgspec.msgpack.encode(old), Sample).episode.info == []
    assert decode(encode(new), Sample).episode.info == [{}, {"asked": True}]
    check_sample(new)


def test_an_environment_s_info_is_recorded_as_bounded_json_never_as_an_error():
    from rlvr.protocol.samples import MAX_INFO_BYTES
    from rlvr.rollout.envs.base import recorded_info

    assert recorded_info({"asked": True, "seen": [1, 2]}) == {"asked": True, "seen": [1, 2]}
    assert recorded_info({"obj": object})["obj"].startswith("<class")  # not JSON: its repr
    huge = recorded_info({"log": "x" * 100_000})
    assert len(msgspec.json.encode(huge)) <= MAX_INFO_BYTES + 64 and huge["bytes"] > 100_000
    deep: dict = {}
    cur = deep
    for _ in range(40):
        cur["a"] = cur = {}
    assert set(recorded_info(deep)) == {"truncated", "bytes"}
    assert recorded_info({(1, 2): 3}) == {"(1, 2)": 3}  # a key JSON cannot have: its repr

    class Hostile:
        def __repr__(self):
            raise RuntimeError("no")

    assert recorded_info({"x": Hostile()}) == {"unrecordable": "RuntimeError: no"}
    good = make_episode_sample()
    r = msgspec.structs.replace
    for info, says in [([{"log": "x" * (MAX_INFO_BYTES + 100)}], "episode.info.0. is more than"),
                       ([deep], "episode.info.0. nests deeper"), ([{}] * 300, "episode.info has 300 entries")]:
        with pytest.raises(MessageInvalidError, match=says):
            check_sample(r(good, episode=r(good.episode, info=info)))


def test_an_episode_sample_is_checked_turn_by_turn():
    good = make_episode_sample()
    check_sample(good)
    assert good.completion.policy_tokens() == 4
    r = msgspec.structs.replace
    bad = [
        (r(good, completion=r(good.completion, mask=[1, 1, 0])), "completion.mask has 3 entries"),
        (r(good, completion=r(good.completion, mask=[0] * 7)), "marks no token as the policy's"),
        (r(good, completion=r(good.completion, mask=[1, 2, 0, 0, 0, 1, 1])), "values other than 0 and 1"),
        (r(good, episode=r(good.episode, turns=[Turn(0, 9, 2)])), "outside the completion"),
        (r(good, episode=r(good.episode, turns=[Turn(5, 7, 3), Turn(0, 2, 2)])), "out of order"),
        (r(good, episode=r(good.episode, turns=[Turn(0, 2, 9)])), "outside the sample's versions"),
        (r(good, episode=r(good.episode, env_reward=float("nan"))), "episode.env_reward must be finite"),
    ]
    for sample, says in bad:
        with pytest.raises(MessageInvalidError, match=says):
            check_sample(sample)


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
