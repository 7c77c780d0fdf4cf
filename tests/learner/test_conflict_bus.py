"""Two verdicts of one sample on SCORED, in both orders, read by a real (dry) learner process
on a real nats-server: the same copy is trained either way, the conflict is counted in the
summary, and the copy put aside is acked (a copy of the same slot), not dead-lettered."""

from __future__ import annotations

import json

import msgspec
import pytest

from rlvr.learner.custody.custody import copy_rank
from rlvr.protocol import DeadLetter
from rlvr.protocol.samples import scored_msg_id
from tests.busclient import BusClient
from tests.conftest import write_config
from tests.learner.learner_helpers import scored_groups

pytestmark = pytest.mark.slow


def _config(tmp_path, run: str):
    return write_config(tmp_path / f"{run}.json", {
        "run": run, "bus": {"heartbeat_every_s": 0.5, "ack_wait_s": 30.0},
        "learn": {"group_size": 4, "groups_per_step": 1, "steps": 1, "max_staleness": 1000,
                  "dynamic_sampling": False, "checkpoint_every": 100, "out_dir": str(tmp_path / run),
                  "lease_ttl_s": 2.0},
    })


@pytest.mark.parametrize("kept_first", [True, False])
def test_two_verdicts_of_one_sample_train_the_same_copy_in_either_order(actors, nats_server, tmp_path, kept_first):
    run = f"cf{int(kept_first)}"
    group = scored_groups(run, 1, vocab=50)
    first = msgspec.structs.replace(group[0], verdict=msgspec.structs.replace(group[0].verdict, reward=1.0,
                                                                             outcome="ok"), replica="verify-0")
    other = msgspec.structs.replace(first, verdict=msgspec.structs.replace(first.verdict, reward=0.0,
                                                                          outcome="wrong"), replica="verify-1")
    low, high = sorted([first, other], key=copy_rank)
    bus = BusClient(nats_server.url, run)
    actors.init(_config(tmp_path, run))
    # Under the ids the verifier gives them (another verdict, another id): SCORED stores both.
    assert scored_msg_id(low.sample, low.verdict) != scored_msg_id(high.sample, high.verdict)
    for sc in [low, high] if kept_first else [high, low]:
        bus.publish(bus.names.scored, sc, msg_id=scored_msg_id(sc.sample, sc.verdict))
    for sc in group[1:]:
        bus.publish(bus.names.scored, sc, msg_id=sc.sample_id)

    proc = actors.start("learn", _config(tmp_path, run), "learn-0")
    assert proc.wait(timeout=180) == 0, actors.log_text("learn-0")[-3000:]
    summary = json.loads((tmp_path / run / "learner_summary.json").read_text())
    # The verdict kept is told by the outcomes of the group trained: by content, whichever came first.
    ok = sum(sc.verdict.outcome == "ok" for sc in [low, *group[1:]])
    assert summary["verifier_outcomes"]["ok"] == ok and sum(summary["verifier_outcomes"].values()) == 4
    assert summary["conflicting_copies"] == 1 and summary["drops"]["conflict"] == 1
    assert summary["samples"]["trained"] == 4 and summary["samples"]["copies"] == 1
    assert [d for d in bus.decoded("DEAD", DeadLetter) if d.stage == "learn"] == []
