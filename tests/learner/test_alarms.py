"""The reward-signal alarms fire on runs that cannot learn and stay silent on a healthy one."""

from __future__ import annotations

import msgspec

from rlvr.learner.watch.alarms import AlarmConfig, SignalWatch
from rlvr.learner.custody.groups import Group, filter_group
from rlvr.protocol import Verdict
from tests.factories import make_scored


def _group(k: int, rewards: list[float], outcome: str = "ok", verifier: str = "math") -> Group:
    members = []
    for i, r in enumerate(rewards):
        sc = make_scored(k=k, i=i, reward=r, n=len(rewards))
        verdict = Verdict(r, outcome if r == 0 else "ok", verifier, {"accuracy": r}, extracted=None,  # type: ignore[arg-type]
                          detail="route=none" if outcome != "ok" else "")
        members.append((i, msgspec.structs.replace(sc, verdict=verdict)))
    return Group(f"t-t{k}", len(rewards), members, 0.0)


def _feed(watch: SignalWatch, groups: list[Group], now: float = 1.0) -> list:
    raised = []
    for g in groups:
        result = filter_group(g, current_version=0, max_staleness=1, dynamic_sampling=True, zero_variance_eps=0.0)
        raised += watch.group(g, result, now=now)
    return raised


def test_a_flat_reward_raises_one_alarm_that_names_the_verifier_and_quotes_what_it_saw():
    watch = SignalWatch(AlarmConfig(min_groups=24), started=0.0)
    raised = _feed(watch, [_group(k, [0.0] * 4, outcome="wrong") for k in range(30)])
    (alarm,) = raised  # raised once, not once per group
    assert alarm.kind == "flat_reward" and alarm.verifier == "math"
    # Raised as soon as min_groups were seen; the heartbeat's line follows the numbers after that.
    assert "24 of the last 24 training groups had zero reward variance" in alarm.message
    assert alarm.outcomes == {"wrong": 64} and len(alarm.examples) == 3  # its last `window` verdicts
    assert alarm.examples[0].completion == "5" and alarm.examples[0].outcome == "wrong"
    (alert,) = watch.alerts()
    assert alert.startswith("flat reward: 30 of the last 30")
    assert alarm.record()["event"] == "alarm"


def test_before_min_groups_only_the_early_timer_raises_it():
    watch = SignalWatch(AlarmConfig(min_groups=24, early_after_s=45.0, min_groups_early=4), started=0.0)
    assert _feed(watch, [_group(k, [0.0] * 4) for k in range(6)], now=10.0) == []
    (alarm,) = watch.check(now=50.0)  # no group kept 50 s in: say so without waiting for 24 groups
    assert alarm.kind == "flat_reward"


def test_a_verifier_that_never_parses_raises_verifier_failing():
    watch = SignalWatch(AlarmConfig(min_samples=32), started=0.0)
    raised = _feed(watch, [_group(k, [0.0] * 4, outcome="parse_error", verifier="mine:fn") for k in range(8)])
    kinds = {a.kind: a for a in raised}
    assert "verifier_failing" in kinds and kinds["verifier_failing"].verifier == "mine:fn"
    assert "parse_error 32" in kinds["verifier_failing"].message


def test_a_healthy_run_raises_nothing():
    watch = SignalWatch(AlarmConfig(), started=0.0)
    groups = [_group(k, [1.0, 0.0, 1.0, 0.0] if k % 3 else [1.0] * 4, outcome="wrong") for k in range(200)]
    assert _feed(watch, groups, now=100.0) == [] and watch.check(now=1000.0) == [] and watch.alerts() == []


def test_an_alarm_clears_when_the_signal_comes_back():
    watch = SignalWatch(AlarmConfig(min_groups=8, window=16), started=0.0)
    _feed(watch, [_group(k, [0.0] * 4) for k in range(10)])
    assert watch.alerts()
    _feed(watch, [_group(100 + k, [1.0, 0.0]) for k in range(16)])
    assert watch.alerts() == []
