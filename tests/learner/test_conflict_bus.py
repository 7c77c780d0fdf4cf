"""Two scorings of one group on SCORED, in both rank orders, read by a real (dry) learner process
on a real nats-server: the copy stored first is trained whatever its rank (a group is complete the
moment its message arrives, and a group gone to a step stands), the conflict is counted in the
summary for each member put aside, and the copy put aside is acked (the same task's group scored
otherwise), not dead-lettered."""

from __future__ import annotations

import json

import msgspec
import pytest

from rlvr.protocol import DeadLetter
from rlvr.protocol.groups import group_rank, scored_group_msg_id
from tests.busclient import BusClient
from tests.conftest import write_config
from tests.factories import scored_messages
from tests.learner.learner_helpers import scored_groups

pytestmark = pytest.mark.slow


def _config(tmp_path, run: str):
    return write_config(tmp_path / f"{run}.json", {
        "run": run, "bus": {"heartbeat_every_s": 0.5, "ack_wait_s": 30.0},
        "learn": {"group_size": 4, "groups_per_step": 1, "steps": 2, "max_staleness": 1000,
                  "dynamic_sampling": False, "checkpoint_every": 100, "out_dir": str(tmp_path / run),
                  "lease_ttl_s": 2.0},
    })


@pytest.mark.parametrize("lower_rank_first", [True, False])
def test_two_scorings_of_one_group_train_the_copy_stored_first_in_either_rank_order(
        actors, nats_server, tmp_path, lower_rank_first):
    run = f"cf{int(lower_rank_first)}"
    group, later = scored_messages(scored_groups(run, 2, vocab=50))
    v0 = group.verdicts[0]
    verdicts = [msgspec.structs.replace(v0, reward=1.0, outcome="ok"), *group.verdicts[1:]]
    one = msgspec.structs.replace(group, verdicts=verdicts, replica="verify-0")
    other = msgspec.structs.replace(one, verdicts=[msgspec.structs.replace(v0, reward=0.0, outcome="wrong"),
                                                   *group.verdicts[1:]], replica="verify-1")
    low, high = sorted([one, other], key=group_rank)
    first, second = (low, high) if lower_rank_first else (high, low)
    bus = BusClient(nats_server.url, run)
    actors.init(_config(tmp_path, run))
    # Under the ids the verifier gives them (another verdict, another id): SCORED stores both.
    assert scored_group_msg_id(low) != scored_group_msg_id(high)
    # The second step needs the later group, stored after both copies: the learner reads the second copy first.
    bus.publish_scored([first, second, later])

    proc = actors.start("learn", _config(tmp_path, run), "learn-0")
    assert proc.wait(timeout=180) == 0, actors.log_text("learn-0")[-3000:]
    summary = json.loads((tmp_path / run / "learner_summary.json").read_text())
    # The verdicts kept are told by the outcomes of the groups trained: the first stored, whatever its rank.
    ok = sum(v.outcome == "ok" for v in first.verdicts + later.verdicts)
    assert summary["verifier_outcomes"]["ok"] == ok and sum(summary["verifier_outcomes"].values()) == 8
    # Every member of the copy put aside is a conflicting copy of a sample (custody is per sample).
    assert summary["conflicting_copies"] == 4 and summary["drops"]["conflict"] == 4
    assert summary["samples"]["trained"] == 8 and summary["samples"]["copies"] == 4
    assert [d for d in bus.decoded("DEAD", DeadLetter) if d.stage == "learn"] == []
