"""The autoscaling policy (rlvr.cli.autoscale.policy.decide): a pure function, driven tick by tick."""

from __future__ import annotations

import msgspec
import pytest

from rlvr.cli.autoscale.policy import AutoscaleConfig, Decision, Observation, PolicyState, ReplicaView, decide

CFG = AutoscaleConfig(enabled=True, min_replicas=1, max_replicas=6, target_backlog_per_replica=10,
                      scale_up_cooldown_s=5, scale_down_stabilization_s=20, dead_after_s=6, startup_grace_s=30)


def fleet(n: int, *, busy: float = 0.9, age: float = 1.0, in_flight: tuple[int, ...] = ()) -> tuple[ReplicaView, ...]:
    return tuple(ReplicaView(f"verify-{i}", started_s_ago=100.0 + i, heartbeat_age_s=age, busy=busy,
                             in_flight=in_flight[i] if i < len(in_flight) else 5) for i in range(n))


class Sim:
    """Apply each decision to an in-memory fleet, as the scaler does with processes."""

    def __init__(self, cfg: AutoscaleConfig, n: int) -> None:
        self.cfg, self.n, self.state, self.log = cfg, n, PolicyState(), []

    def tick(self, at: float, backlog: int | None, busy: float = 0.9) -> Decision:
        d, self.state = decide(self.cfg, Observation(at, backlog, fleet(self.n, busy=busy)), self.state)
        self.n = d.target
        self.log.append(d)
        return d


def test_a_rising_backlog_adds_replicas_at_most_doubling_then_waits_out_the_cool_down():
    sim = Sim(CFG, 1)
    assert sim.tick(0, 5).action == "hold"  # within the target
    d = sim.tick(2, 100)  # 100 waiting, 10 per replica: wants 10, doubles to 2
    assert (d.action, d.target) == ("up", 2)
    assert "backlog 100 > 10 per replica x 1" in d.reason
    assert sim.tick(4, 100).action == "hold"  # cool-down: the new replica is starting
    assert "cool-down" in sim.log[-1].reason
    assert (sim.tick(7, 100).target, sim.tick(13, 100).target) == (4, 6)  # 2 -> 4 -> 6 (max)
    assert sim.tick(30, 500).action == "hold"  # at max_replicas, whatever the backlog


def test_a_backlog_within_the_tolerance_moves_nothing():
    d, _ = decide(CFG, Observation(0, 21, fleet(2)), PolicyState())  # 21 <= 10 x 2 x 1.1
    assert d.action == "hold" and d.target == 2
    d, _ = decide(CFG, Observation(0, 23, fleet(2)), PolicyState())
    assert d.action == "up" and d.target == 3


def test_a_falling_backlog_drains_one_replica_per_stabilization_window():
    sim = Sim(CFG, 4)
    downs = [(t, d.target) for t in range(0, 100, 2) if (d := sim.tick(t, 0, busy=0.0)).action == "down"]
    # Low from t=0: the first drain after 20 s of quiet, then one per 20 s, down to min_replicas.
    assert downs == [(20, 3), (40, 2), (60, 1)]
    assert sim.n == 1 and sim.log[-1].action == "hold"


def test_busy_replicas_with_a_small_backlog_are_keeping_up_and_are_not_drained():
    sim = Sim(CFG, 3)
    assert all(sim.tick(t, 2, busy=0.8).action == "hold" for t in range(0, 200, 2))
    assert "backlog 2 for 3 replicas" in sim.log[-1].reason


def test_a_flapping_backlog_goes_up_once_and_never_down_while_it_flaps():
    sim = Sim(CFG, 1)
    for t in range(0, 200, 2):
        sim.tick(t, 40 if (t // 2) % 2 == 0 else 0, busy=0.0 if (t // 2) % 2 else 0.9)
    actions = [d.action for d in sim.log]
    assert "down" not in actions
    ups = [d for d in sim.log if d.action == "up"]
    assert [d.target for d in ups] == [2, 4]  # 40 > 10 x 1 -> 2; 40 > 10 x 2 -> 4; then 40 fits 4 x 10
    # Once it stops flapping and stays low, the window runs and replicas drain again.
    assert any(sim.tick(t, 0, busy=0.0).action == "down" for t in range(200, 260, 2))


def test_a_step_up_restarts_the_scale_down_window():
    state = PolicyState(last_up_at=95.0, low_since=50.0)
    d, _ = decide(CFG, Observation(100, 0, fleet(3, busy=0.0)), state)
    assert d.action == "hold" and "5s so far" in d.reason


def test_a_replica_with_no_heartbeat_is_replaced_in_place_and_not_counted_as_capacity():
    views = fleet(2) + (ReplicaView("verify-2", started_s_ago=200, heartbeat_age_s=30.0, busy=0.0),)
    d, _ = decide(CFG, Observation(0, 25, views), PolicyState())
    assert d.replace == ("verify-2",)
    assert d.action == "hold" and d.target == 3  # the dead one's slot is kept (25 <= 10 x 3 x 1.1)
    assert "replacing 1 dead (verify-2)" in d.reason


def test_a_new_replica_has_its_start_up_grace_before_it_counts_as_dead():
    starting = ReplicaView("verify-1", started_s_ago=10, heartbeat_age_s=None)
    late = ReplicaView("verify-1", started_s_ago=31, heartbeat_age_s=None)
    assert decide(CFG, Observation(0, 0, fleet(1) + (starting,)), PolicyState())[0].replace == ()
    assert decide(CFG, Observation(0, 0, fleet(1) + (late,)), PolicyState())[0].replace == ("verify-1",)


def test_dead_replicas_do_not_drive_a_scale_down_and_a_busy_share_is_read_from_live_ones_only():
    dead_idle = ReplicaView("verify-9", started_s_ago=500, heartbeat_age_s=60.0, busy=0.0)
    sim_state = PolicyState(low_since=0.0)
    d, _ = decide(CFG, Observation(100, 1, fleet(2, busy=0.9) + (dead_idle,)), sim_state)
    assert d.action == "hold" and d.replace == ("verify-9",)


def test_the_bounds_are_enforced_at_once_whatever_the_backlog_or_cool_down():
    cfg = msgspec.structs.replace(CFG, min_replicas=2, max_replicas=3)
    d, _ = decide(cfg, Observation(0, 0, fleet(1)), PolicyState(last_up_at=0.0))
    assert (d.action, d.target) == ("up", 2) and "below min_replicas 2" in d.reason
    d, _ = decide(cfg, Observation(0, 10_000, fleet(5, in_flight=(9, 0, 9, 1, 9))), PolicyState())
    assert (d.action, d.target) == ("down", 3) and d.drain == ("verify-1", "verify-3")


def test_draining_replicas_are_not_counted_and_never_drained_twice():
    views = fleet(2, busy=0.0) + (ReplicaView("verify-7", started_s_ago=5, heartbeat_age_s=1, draining=True),)
    d, _ = decide(CFG, Observation(100, 0, views), PolicyState(low_since=0.0))
    assert d.current == 2 and d.action == "down" and d.drain and "verify-7" not in d.drain


def test_the_drained_replica_holds_the_fewest_messages_the_newest_on_a_tie():
    views = fleet(3, busy=0.0, in_flight=(3, 0, 0))
    d, _ = decide(CFG, Observation(100, 0, views), PolicyState(low_since=0.0))
    assert d.drain == ("verify-1",)  # verify-1 and verify-2 hold none; verify-1 started later (smaller age)


def test_an_unknown_backlog_holds_but_still_replaces_the_dead():
    views = fleet(1) + (ReplicaView("verify-1", started_s_ago=100, heartbeat_age_s=99.0),)
    d, _ = decide(CFG, Observation(0, None, views), PolicyState())
    assert d.action == "hold" and d.replace == ("verify-1",) and "backlog unknown" in d.reason


def test_a_config_whose_max_is_below_its_min_names_the_key():
    with pytest.raises(msgspec.ValidationError, match="max_replicas"):
        msgspec.convert({"min_replicas": 3, "max_replicas": 2}, AutoscaleConfig)


def test_the_reason_carries_what_the_heartbeats_say():
    views = tuple(msgspec.structs.replace(r, samples_per_s=5.0, latency_p99_s=1.5) for r in fleet(1, busy=1.0))
    d, _ = decide(CFG, Observation(0, 100, views), PolicyState())
    assert "busy 100%" in d.reason and "5.0 samples/s, drains in ~20s" in d.reason and "p99 1.50s" in d.reason
