"""An alarm speaks when its condition starts, says when it clears, and is summarised once:
a condition that goes on, off (long enough) and on again is two raises and one clear; one that
flickers is one alarm. And a verifier whose verdicts are mostly timeouts is a failing verifier."""

from __future__ import annotations

import msgspec

from rlvr.learner.watch.alarm_edges import AlarmEdges
from rlvr.learner.watch.alarms import Alarm, AlarmConfig, SignalWatch
from rlvr.learner.custody.groups import Group
from rlvr.learner.watch.step_alarms import StepAlarmConfig, StepWatch
from rlvr.protocol import Verdict
from rlvr.protocol.samples import Episode, Turn
from tests.factories import make_scored
from tests.learner.test_alarms import _feed


def _steps(watch: StepWatch, entropies: list[float]) -> tuple[list, list]:
    """Feed one step record per entropy, a second apart; (raised, cleared) over them all."""
    raised, cleared = [], []
    for i, h in enumerate(entropies):
        raised += watch.step({"step": i + 1, "entropy": h}, now=float(i))
        cleared += watch.take_cleared()
    return raised, cleared


def test_a_condition_on_off_on_raises_twice_and_clears_once_with_its_duration():
    watch = StepWatch(StepAlarmConfig(entropy_min=0.02, clear_after_steps=3))
    low, ok = 0.001, 1.0
    # on for 3 steps (0-2), off for 3 (3-5: cleared at the third, t=5), on again from t=6 to the end.
    raised, cleared = _steps(watch, [low] * 3 + [ok] * 3 + [low] * 2)
    assert [a.kind for a in raised] == ["entropy_collapse", "entropy_collapse"]
    (clear,) = cleared
    assert clear.kind == "entropy_collapse" and clear.seconds == 5.0 and "entropy collapsed" in clear.message
    assert clear.record()["event"] == "alarm_cleared"
    assert watch.counts == {"entropy_collapse": 2}
    assert watch.edges.seconds(now=10.0) == {"entropy_collapse": 5.0 + (10.0 - 6.0)}  # the open one up to now
    assert watch.alerts()  # holding again


def test_a_flickering_condition_is_one_alarm_not_one_per_rise():
    watch = StepWatch(StepAlarmConfig(entropy_min=0.02, clear_after_steps=3))
    low, ok = 0.001, 1.0
    raised, cleared = _steps(watch, [low, ok, low, ok, ok, low, ok, low] * 4)
    assert len(raised) == 1 and cleared == [] and watch.counts["entropy_collapse"] == 1


def test_the_edges_alone():
    edges = AlarmEdges(clear_after=2)
    a = Alarm("flat_reward", "math", "flat", {}, [])
    assert edges.update({"k": a}, now=0.0) == [a]
    assert edges.update({"k": a}, now=1.0) == []  # held: said once
    assert edges.update({}, now=2.0) == [] and edges.take_cleared() == []  # one quiet check: still active
    assert edges.update({}, now=3.0) == [] and [c.seconds for c in edges.take_cleared()] == [3.0]
    assert edges.active == {} and edges.take_cleared() == []  # each clear said once


def _group(k: int, rewards: list[float], outcome: str, episode_end: str | None = None) -> Group:
    members = []
    for i, r in enumerate(rewards):
        sc = make_scored(k=k, i=i, reward=r, n=len(rewards))
        sample = sc.sample if episode_end is None else msgspec.structs.replace(
            sc.sample, episode=Episode("quiz", [Turn(0, 2, 0)], episode_end))  # type: ignore[arg-type]
        verdict = Verdict(r, outcome if r == 0 else "ok", "code", {"accuracy": r})  # type: ignore[arg-type]
        members.append((i, msgspec.structs.replace(sc, sample=sample, verdict=verdict)))
    return Group(f"t-t{k}", len(rewards), members, 0.0)


def test_a_verifier_that_mostly_times_out_raises_verifier_failing_naming_timeouts():
    watch = SignalWatch(AlarmConfig(min_samples=32), started=0.0)
    groups = [_group(k, [1.0, 0.0, 0.0, 0.0], "timeout") for k in range(8)]  # 3 of 4 verdicts time out
    (alarm,) = [a for a in _feed(watch, groups) if a.kind == "verifier_failing"]
    assert alarm.verifier == "code" and "timeout 24" in alarm.message and "ran past its time limit" in alarm.message
    watch = SignalWatch(AlarmConfig(min_samples=32), started=0.0)
    groups = [_group(k, [1.0, 0.0, 0.0, 0.0], "sandbox_error") for k in range(8)]
    assert "verifier_failing" in {a.kind for a in _feed(watch, groups)}


def test_episodes_the_environment_failed_or_the_rollout_cut_are_not_the_verifier_s_failures():
    watch = SignalWatch(AlarmConfig(min_samples=32), started=0.0)
    groups = [_group(k, [0.0] * 4, "error", episode_end=("env_error", "prompt_cap")[k % 2]) for k in range(16)]
    assert "verifier_failing" not in {a.kind for a in _feed(watch, groups)}


def test_a_signal_watch_alarm_goes_on_off_on_twice_and_clears_once():
    watch = SignalWatch(AlarmConfig(min_groups=4, window=4, flat_share=0.9, clear_after=3), started=0.0)
    flat = [_group(k, [0.0] * 4, "wrong") for k in range(4)]
    mixed = [_group(100 + k, [1.0, 0.0], "wrong") for k in range(6)]
    flat_again = [_group(200 + k, [0.0] * 4, "wrong") for k in range(4)]
    raised, cleared = [], []
    for t, g in enumerate(flat + mixed + flat_again):
        raised += _feed(watch, [g], now=float(t))
        cleared += watch.take_cleared()
    assert [a.kind for a in raised] == ["flat_reward", "flat_reward"] and len(cleared) == 1
    assert cleared[0].kind == "flat_reward" and cleared[0].verifier == "code"
    assert watch.counts == {"flat_reward": 2}
