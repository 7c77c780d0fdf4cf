"""Agent episodes with several segments in the learner role, on a real nats-server with real DeepSpeed (CPU):
each sample of a group message is trained exactly once whatever its segments (custody is per sample, not per
segment), the step metrics count the segments, and a copy of an agent's group generated again (one member with
another history, so other prompt ids) is a copy of the same task's group, acked, never dead-lettered as other
work."""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgspec
import pytest

from rlvr.learner.custody.checkpoint import CheckpointStore
from rlvr.learner.example.tiny_model import build_tiny_model
from rlvr.protocol import Completion, DeadLetter, Episode, Scored, Turn
from rlvr.protocol.samples import Segment
from tests.busclient import BusClient
from tests.factories import scored_messages
from tests.learner.learner_helpers import learner_config, scored_groups


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny", hidden=64, layers=1, heads=2)


def _agent(sc: Scored, rng: random.Random, vocab: int, segments: int) -> Scored:
    """``sc`` as an agent's episode: its own segment (a model turn, the agent's tool result, a model turn) and
    ``segments`` earlier ones (histories the agent compacted away), each a model turn then a masked message."""
    def ids(n: int) -> list[int]:
        return [rng.randrange(3, vocab) for _ in range(n)]

    own = Completion(ids(7), [-1.0, -1.0, 0.0, 0.0, 0.0, -1.0, -1.0], [1, 1, 0, 0, 0, 1, 1])
    earlier = [Segment(ids(5), Completion(ids(4), [-1.0, -1.0, 0.0, 0.0], [1, 1, 0, 0]), [Turn(0, 2, 0)])
               for _ in range(segments)]
    episode = Episode("my-agent", [Turn(0, 2, 0), Turn(5, 7, 0)], "done", segments=earlier, agent=True)
    sample = msgspec.structs.replace(sc.sample, prompt_ids=ids(6), completion=own, episode=episode)
    return msgspec.structs.replace(sc, sample=sample)


def test_segmented_agent_episodes_train_once_per_sample_and_a_regenerated_copy_is_no_conflict(
        actors, nats_server, tmp_path, tiny_model):
    run = "seg"
    vocab = json.loads((tiny_model / "config.json").read_text())["vocab_size"]
    rng = random.Random(0)
    bus = BusClient(nats_server.url, run)
    cfg = learner_config(tmp_path, run, tiny_model, zero_stage=2, steps=1, groups_per_step=2)
    proc = actors.start("learn", cfg, "learn-0")
    bus.wait_heartbeat(lambda hb: hb.role == "learn" and hb.state == "running", timeout_s=120)
    plain = scored_groups(run, 2, vocab=vocab)
    agents = [_agent(sc, rng, vocab, segments=k % 3) for k, sc in enumerate(plain[:4])]  # 0, 1, 2, 0 segments
    # The group generated again (a replica died before acking its task): a member with another history, other
    # prompt ids.
    again = _agent(plain[1], rng, vocab, segments=1)
    assert again.sample.prompt_ids != agents[1].sample.prompt_ids
    copies = scored_messages(agents) + scored_messages([agents[0], again, *agents[2:]]) + scored_messages(plain[4:])
    for g in copies:
        bus.publish(bus.names.scored, g, msg_id=f"{g.task_id}/{rng.random()}")  # past the duplicate window
    assert proc.wait(timeout=300) == 0, actors.log_text("learn-0")[-3000:]

    entries = CheckpointStore(tmp_path / f"out-{run}" / "checkpoints").ledger_entries()
    trained = [sid for e in entries for sid in e.trained]
    assert sorted(trained) == sorted(sc.sample_id for sc in plain)  # each message once, never a segment's id
    assert bus.decoded("DEAD", DeadLetter) == []  # the regenerated copy was no other work
    records = [json.loads(line) for line in (tmp_path / f"out-{run}" / "metrics.jsonl").read_text().splitlines()]
    (step,) = [r for r in records if "episode_segments_max" in r]
    assert step["episode_segments_max"] == 3.0 and step["episode_segments_mean"] == pytest.approx((1 + 2 + 3 + 1) / 4)
