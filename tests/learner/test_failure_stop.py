"""Samples that fail in a row: the alarm quotes the first failure's exception line whole and names its source,
the feeder backs off, and the run stops only when both bounds hold (issue 44). Pure: no bus, no clock."""

from __future__ import annotations

import msgspec
import pytest

from rlvr.learner.custody.groups import Group, filter_group
from rlvr.learner.watch.alarms import AlarmConfig, SignalWatch
from rlvr.learner.watch.exception_line import LINE_CHARS, exception_line
from rlvr.learner.watch.failure_stop import FailureConfig, FailureWatch, RunCannotLearnError, failure_of
from rlvr.learner.watch.tally import RunTally
from rlvr.protocol import Verdict
from rlvr.protocol.samples import Episode
from tests.factories import make_scored

CFG = FailureConfig(alarm_after=8, alarm_after_s=60, stop_after=32, stop_after_s=90, backoff_initial_s=0.25,
                    backoff_max_s=2.0)
LONG = "RuntimeError: " + "the reward server said no; " * 40  # far past the 300 characters a quote keeps


def _agent_failed(k: int, i: int, detail: str, end: str = "env_error", n: int = 4):
    sc = make_scored(k=k, i=i, reward=0.0, n=n, outcome="error")
    e = Episode("calc", [], end, detail=detail, agent=True)  # type: ignore[arg-type]
    return msgspec.structs.replace(sc, sample=msgspec.structs.replace(sc.sample, episode=e))


def _verifier_failed(k: int, i: int, detail: str, n: int = 4):
    sc = make_scored(k=k, i=i, reward=0.0, n=n, outcome="error")
    return msgspec.structs.replace(sc, verdict=Verdict(0.0, "error", "my_rewards:compute_score", detail=detail))


def _raising_agent_group(k: int, n: int = 4) -> list:
    return [_agent_failed(k, i, f"the agent raised AttributeError: 'NoneType' object has no attribute 'chat' "
                                f"(episode {k}/{i})") for i in range(n)]


def test_the_exception_line_is_found_in_every_form_a_detail_takes_and_kept_whole():
    traceback = ("the agent exited with status 1; stderr: Traceback (most recent call last):\n"
                 '  File "agent.py", line 3, in <module>\n    client.chat()\n    ^^^^^^^^^^^\n'
                 "AttributeError: 'NoneType' object has no attribute 'chat'")
    assert exception_line(traceback) == "AttributeError: 'NoneType' object has no attribute 'chat'"
    assert exception_line("compute_score raised " + LONG) == LONG.rstrip()  # whole: 1,000+ characters
    assert exception_line("reset() raised json.decoder.JSONDecodeError: Expecting value: line 1") == \
        "json.decoder.JSONDecodeError: Expecting value: line 1"
    missing = "the reward function requires column(s) 'solution', which the record lacks; its columns: prompt"
    assert exception_line(missing) == missing  # no exception in it: the detail itself
    assert exception_line("") == ""
    cut = exception_line("X raised ValueError: " + "x" * (2 * LINE_CHARS))
    assert len(cut) == LINE_CHARS and cut.endswith("…")  # bounded, and the cut is marked


def test_each_kind_of_failure_names_its_source_and_a_fix_and_a_usable_sample_is_none():
    assert failure_of(make_scored(reward=0.0, outcome="wrong")) is None  # a wrong answer is the policy's
    assert failure_of(make_scored(reward=0.0, outcome="parse_error")) is None
    agent = failure_of(_raising_agent_group(0)[0])
    assert (agent.kind, agent.source) == ("env_error", "agent 'calc'") and "rollout.agent" in agent.fix
    verifier = failure_of(_verifier_failed(0, 0, "compute_score raised " + LONG))
    assert (verifier.kind, verifier.source, verifier.line) == ("error", "verifier 'my_rewards:compute_score'",
                                                               LONG.rstrip())
    cap = failure_of(_agent_failed(0, 0, "turn 0: the conversation (90 tokens) outgrew the engine's "
                                         "max_prompt_tokens (64)", end="prompt_cap"))
    assert cap.source == "the rollout (agent 'calc')" and "(90 tokens)" in cap.line
    assert "max_prompt_tokens" in cap.fix
    sc = make_scored(reward=0.0, outcome="parse_error")
    rejected = msgspec.structs.replace(
        sc, sample=msgspec.structs.replace(sc.sample, finish_reason="rejected"),
        verdict=Verdict(0.0, "parse_error", "exact", detail="prompt rejected by the rollout: prompt has 40 tokens > "
                                                            "limit 4 (rollout.engine.max_prompt_tokens)"))
    f = failure_of(rejected)
    assert f.kind == "rejected" and "40 tokens > limit 4" in f.line and "max_prompt_tokens" in f.fix


def test_the_alarm_quotes_the_first_failure_whole_and_clears_at_the_first_usable_sample():
    watch = FailureWatch(CFG)
    first = [_verifier_failed(0, i, "compute_score raised " + LONG) for i in range(4)]
    assert watch.group(first, now=0.0) == []  # 4 in a row: not yet
    raised = watch.group([_verifier_failed(1, i, "other") for i in range(4)], now=1.0)
    assert [a.kind for a in raised] == ["samples_failing"]
    msg = raised[0].message
    assert LONG.rstrip() in msg and "verifier 'my_rewards:compute_score'" in msg and "rlvr-actor audit" in msg
    assert raised[0].examples[0].detail == LONG.rstrip()  # the quoted example keeps it whole too
    assert watch.alerts() == [msg] and watch.group(first, now=2.0) == []  # said once while it holds
    watch.group([make_scored(k=3, i=i, reward=float(i % 2)) for i in range(4)], now=3.0)
    assert [c.kind for c in watch.take_cleared()] == ["samples_failing"] and watch.alerts() == []


def test_one_failure_with_nothing_usable_after_it_is_said_within_alarm_after_s():
    watch = FailureWatch(CFG)
    assert watch.group(_raising_agent_group(0, n=2), now=0.0) == []
    assert watch.check(now=59.0) == []
    assert [a.kind for a in watch.check(now=60.0)] == ["samples_failing"]


def test_the_run_stops_only_after_stop_after_failures_and_stop_after_s_and_a_success_resets_both():
    watch = FailureWatch(CFG)
    for k in range(8):  # 32 failures within a second: an outage's burst is not enough on its own
        watch.group(_raising_agent_group(k), now=k / 8)
    assert watch.streak.samples == 32 and watch.stop(now=89.0) is None
    watch.group([make_scored(k=9, i=i, reward=float(i % 2)) for i in range(4)], now=89.5)  # the service is back
    assert watch.streak is None and watch.stop(now=200.0) is None
    watch.group(_raising_agent_group(10), now=100.0)
    assert watch.stop(now=191.0) is None  # 90 s, but only 4 in a row
    for k in range(11, 18):
        watch.group(_raising_agent_group(k), now=191.0)
    stop = watch.stop(now=191.0)
    assert stop is not None and stop.samples == 32 and stop.groups == 8 and stop.seconds == 91.0
    assert stop.line == "AttributeError: 'NoneType' object has no attribute 'chat' (episode 10/0)"
    assert stop.source == "agent 'calc'" and stop.causes == {"env_error from agent 'calc'": 32}
    with pytest.raises(RunCannotLearnError) as raised:
        watch.raise_if_cannot_learn(now=191.0)
    error = raised.value
    assert error.exit_code == 4 and error.stop == stop and stop.line in str(error) and stop.fix in str(error)
    assert FailureWatch(FailureConfig(stop_after=0)).stop(now=1e9) is None  # 0: never stop


def test_the_feeder_s_wait_doubles_with_each_failed_group_up_to_its_cap_and_ends_at_a_success():
    watch = FailureWatch(CFG)
    assert watch.backoff_s() == 0.0
    waits = []
    for k in range(6):
        watch.group(_raising_agent_group(k), now=0.0)
        waits.append(watch.backoff_s())
    assert waits == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    mixed = _raising_agent_group(7)[:3] + [make_scored(k=7, i=3, reward=1.0)]  # one usable sample is enough
    watch.group(mixed, now=1.0)
    assert watch.backoff_s() == 0.0


@pytest.mark.parametrize("dynamic_sampling", [True, False])
def test_the_zero_variance_share_counts_flat_groups_whether_dropped_or_trained(dynamic_sampling):
    tally, signal = RunTally(), SignalWatch(AlarmConfig(min_groups=4))
    for k in range(4):
        group = Group(f"t-t{k}", 4, [(i, make_scored(k=k, i=i, reward=0.0, outcome="wrong")) for i in range(4)], 0.0)
        result = filter_group(group, current_version=0, max_staleness=1, dynamic_sampling=dynamic_sampling,
                              zero_variance_eps=1e-6)
        assert result.flat and bool(result.kept) is not dynamic_sampling
        tally.group([sc for _, sc in group.members], flat=result.flat)
        raised = signal.group(group, result, now=0.0)
    assert tally.zero_variance_share() == 1.0  # with dynamic sampling off it read 0.0
    assert [a.kind for a in raised] == ["flat_reward"]


def test_the_verifier_failing_alarm_quotes_a_failed_verification_s_exception_line_whole():
    watch = SignalWatch(AlarmConfig(min_samples=4))
    members = [(i, _verifier_failed(0, i, "reward function compute_score raised " + LONG)) for i in range(4)]
    group = Group("t-t0", 4, members, 0.0)
    result = filter_group(group, current_version=0, max_staleness=1, dynamic_sampling=True, zero_variance_eps=1e-6)
    (alarm,) = watch.group(group, result, now=0.0)
    assert alarm.kind == "verifier_failing" and alarm.examples[-1].detail == LONG.rstrip()  # a 300 cut read "...cra"
