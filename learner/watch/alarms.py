"""Alarms on the reward signal: a run that cannot learn says so early.

GRPO learns only from groups whose rewards differ. Two ways a run goes wrong
without any error, which ``SignalWatch`` catches from the complete training
groups the learner sees (trained or dropped):

- ``flat_reward``: nearly every group has zero reward variance (all wrong,
  or all right), so dynamic sampling drops them and no step comes (or, with
  it off, they train with no advantage). Raised
  when at least ``flat_share`` of the last ``window`` groups were flat, once
  ``min_groups`` have been seen, or sooner (``min_groups_early``) once
  ``early_after_s`` seconds have passed without a kept group;
- ``verifier_failing``: one verifier's ``parse_error`` + ``error`` +
  ``timeout`` + ``sandbox_error`` share of its last ``window`` verdicts is at
  least ``failure_share`` (it never finds the answer, the reward function
  raises, it runs past its time limit, or its sandbox fails): its rewards say
  nothing about the policy. Needs ``min_samples`` verdicts. An episode the
  environment failed or the rollout cut (``ENV_FAILURES``) is not the
  verifier's verdict and is not counted.

An alarm carries a message naming the verifier, its outcome counts, and a
few completions with their verdicts (what the verifier actually saw); it is
logged once when its condition starts to hold, written to ``metrics.jsonl``
(``"event": "alarm"``), shown by ``up``'s display and carried in the
learner's heartbeat (``alerts``, which ``status`` prints) while it holds. It
clears once its condition has been false for ``clear_after`` checks in a row
(``alarm_edges.py``: a flickering share is one alarm, not one per group), and
says so once (``"event": "alarm_cleared"``). Pure: no I/O here.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from typing import Annotated

import msgspec
from msgspec import Meta, Struct

from rlvr.learner.watch.alarm_edges import AlarmCleared, AlarmEdges
from rlvr.learner.custody.groups import VERIFY_FAILED, FilterResult, Group
from rlvr.learner.watch.exception_line import exception_line
from rlvr.learner.watch.step_alarms import StepAlarmConfig
from rlvr.protocol.samples import ENV_FAILURES

# Verdict outcomes that say the verifier, not the policy, failed.
FAILING = ("parse_error", "error", "timeout", "sandbox_error")


class AlarmConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # Raise flat_reward when at least this share of recent training groups had zero reward variance.
    flat_share: Annotated[float, Meta(gt=0, le=1)] = 0.9
    # The recent groups (and verdicts per verifier) the alarms look at.
    window: Annotated[int, Meta(ge=1)] = 64
    # Groups seen before flat_reward may be raised...
    min_groups: Annotated[int, Meta(ge=1)] = 24
    # ...or sooner: once early_after_s seconds have passed with no group kept,
    early_after_s: Annotated[float, Meta(gt=0)] = 45.0
    # ...from this many groups.
    min_groups_early: Annotated[int, Meta(ge=1)] = 4
    # Raise verifier_failing when a verifier's parse_error + error + timeout + sandbox_error
    # share of its recent verdicts reaches this...
    failure_share: Annotated[float, Meta(gt=0, le=1)] = 0.5
    # ...once it has given this many verdicts.
    min_samples: Annotated[int, Meta(ge=1)] = 32
    # Completions quoted in an alarm (the last ones the verifier judged).
    examples: Annotated[int, Meta(ge=0)] = 3
    # Characters kept of each quoted completion and verdict detail (a failed verification's
    # exception line is kept whole).
    example_chars: Annotated[int, Meta(ge=20)] = 300
    # Checks in a row (one per group, and the progress timer's) an alarm's condition must be
    # false before it clears: a share flickering around its threshold stays one alarm.
    clear_after: Annotated[int, Meta(ge=1)] = 8
    # The stage-1 alarms on the step records: KL, entropy, language mixing, length, dropped share.
    steps: StepAlarmConfig = StepAlarmConfig()


class Example(Struct, frozen=True):
    sample_id: str
    completion: str
    reward: float
    outcome: str
    extracted: str | None
    detail: str


class Alarm(Struct, frozen=True):
    kind: str  # "flat_reward" | "verifier_failing" | a stage-1 alarm of step_alarms.py
    verifier: str
    message: str
    outcomes: dict[str, int]
    examples: list[Example]

    def record(self) -> dict:
        """The metrics.jsonl line for this alarm."""
        return {"event": "alarm", **msgspec.to_builtins(self)}


class SignalWatch:
    def __init__(self, cfg: AlarmConfig | None = None, *, started: float | None = None) -> None:
        self.cfg = cfg or AlarmConfig()
        self.started = time.monotonic() if started is None else started
        self.groups_seen = 0
        self.groups_kept = 0
        self._flat: deque[bool] = deque(maxlen=self.cfg.window)
        self._verdicts: dict[str, deque[str]] = {}
        self._examples: dict[str, deque[Example]] = {}
        # Which alarms hold, their raises (the summary's alarm_counts) and how long they held.
        self.edges = AlarmEdges(self.cfg.clear_after)

    @property
    def active(self) -> dict[tuple[str, str], Alarm]:
        return self.edges.active

    @property
    def counts(self) -> Counter[str]:
        return self.edges.counts

    def group(self, group: Group, result: FilterResult, now: float | None = None) -> list[Alarm]:
        """Take one complete training group; the alarms raised by it (new ones only)."""
        cfg = self.cfg
        self.groups_seen += 1
        self.groups_kept += bool(result.kept)
        # Flat whether dynamic sampling dropped the group or (turned off) trained it: no signal either way.
        self._flat.append(result.flat)
        for _, sc in group.members:
            if sc.sample.episode is not None and sc.sample.episode.end_reason in ENV_FAILURES:
                continue  # the environment's failure or the rollout's cut, scored error: not the verifier's
            name = sc.verdict.verifier or sc.sample.verifier.name
            self._verdicts.setdefault(name, deque(maxlen=cfg.window)).append(sc.verdict.outcome)
            v = sc.verdict
            # A failed verification's exception line is quoted whole (a cut once read "RuntimeError: cra").
            detail = exception_line(v.detail) if v.outcome in VERIFY_FAILED else v.detail[: cfg.example_chars]
            self._examples.setdefault(name, deque(maxlen=max(1, cfg.examples))).append(Example(
                sc.sample_id, sc.sample.text[: cfg.example_chars], v.reward, v.outcome, v.extracted, detail,
            ))
        return self.check(now)

    def check(self, now: float | None = None) -> list[Alarm]:
        """Evaluate every alarm now (also called on a timer: the early flat alarm needs no new group);
        the alarms whose condition started to hold (a clear waits in ``take_cleared``)."""
        now = time.monotonic() if now is None else now
        current: dict[tuple[str, str], Alarm] = {}
        if (alarm := self._flat_alarm(now)) is not None:
            # Keyed by kind alone: the verifier it names is the busiest one, which may change.
            current[("flat_reward", "")] = alarm
        for name in self._verdicts:
            if (alarm := self._failing_alarm(name)) is not None:
                current[("verifier_failing", name)] = alarm
        return self.edges.update(current, now)

    def take_cleared(self) -> list[AlarmCleared]:
        """The alarms that cleared since the last call."""
        return self.edges.take_cleared()

    def alerts(self) -> list[str]:
        """One line per alarm holding now (the heartbeat's ``alerts``)."""
        return [a.message for a in self.active.values()]

    def _flat_alarm(self, now: float) -> Alarm | None:
        cfg, n = self.cfg, len(self._flat)
        early = now - self.started >= cfg.early_after_s and self.groups_kept == 0 and n >= cfg.min_groups_early
        if not (n >= cfg.min_groups or early) or sum(self._flat) < cfg.flat_share * n:
            return None
        name = self._main_verifier()
        outcomes = Counter(self._verdicts.get(name, ()))
        msg = (f"flat reward: {sum(self._flat)} of the last {n} training groups had zero reward variance "
               f"({self.groups_kept} of {self.groups_seen} groups kept so far), so GRPO has no signal; "
               f"verifier {name!r} outcomes: {_counts(outcomes)}. Look at what it saw (examples), check the "
               "prompt asks for the format the verifier reads, and that the task is within the model's reach")
        return Alarm("flat_reward", name, msg, dict(outcomes), list(self._examples.get(name, ())))

    def _failing_alarm(self, name: str) -> Alarm | None:
        cfg, verdicts = self.cfg, self._verdicts[name]
        if len(verdicts) < cfg.min_samples:
            return None
        outcomes = Counter(verdicts)
        failing = sum(outcomes[o] for o in FAILING)
        if failing < cfg.failure_share * len(verdicts):
            return None
        msg = (f"verifier {name!r} fails on {failing} of its last {len(verdicts)} verdicts "
               f"({_counts(outcomes)}): parse_error means it found no answer where it looks, error that it "
               "raised or returned no usable reward, timeout that it ran past its time limit (raise "
               "[verify] timeout_s, or more verifier replicas), sandbox_error that its sandbox failed "
               "(see examples' detail)")
        return Alarm("verifier_failing", name, msg, dict(outcomes), list(self._examples.get(name, ())))

    def _main_verifier(self) -> str:
        return max(self._verdicts, key=lambda n: len(self._verdicts[n]), default="?")


def _counts(outcomes: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in outcomes.most_common()) or "none"


__all__ = ["Alarm", "AlarmConfig", "Example", "SignalWatch"]
