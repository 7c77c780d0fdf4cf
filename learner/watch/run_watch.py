"""The learner's three watches, and the one place their alarms are spoken.

- ``signal`` (``alarms.SignalWatch``): the reward signal over the complete
  training groups (``flat_reward``, ``verifier_failing``);
- ``steps`` (``step_alarms.StepWatch``): the stage-1 alarms over step records
  and evaluation rounds;
- ``failures`` (``failure_stop.FailureWatch``): training samples that fail in
  a row (``samples_failing``, the feeder's backoff, the stop of a run that
  cannot learn).

An alarm is spoken when it is raised (a warning in the learner's log, an
``"event": "alarm"`` line in ``metrics.jsonl``, which ``up``'s display shows)
and once more when it clears; ``alerts`` are the ones holding now (the
heartbeat's, the summary's). The watches decide; this module only says.
"""

from __future__ import annotations

from typing import Callable

import msgspec

from rlvr.actors.logs import get_logger
from rlvr.learner.watch.alarms import Alarm, AlarmConfig, SignalWatch
from rlvr.learner.watch.failure_stop import FailureConfig, FailureWatch
from rlvr.learner.watch.step_alarms import StepWatch

log = get_logger("rlvr.learner")


class RunWatch:
    def __init__(self, alarms: AlarmConfig, failures: FailureConfig) -> None:
        self.signal = SignalWatch(alarms)
        self.steps = StepWatch(alarms.steps)
        self.failures = FailureWatch(failures, example_chars=alarms.example_chars)

    def speak(self, raised: list[Alarm], write: Callable[[dict], None]) -> None:
        """Say each alarm whose condition started to hold, then each that cleared since (once each);
        ``write`` takes a metrics.jsonl record."""
        for alarm in raised:
            log.warning("run_alarm", kind=alarm.kind, verifier=alarm.verifier, message=alarm.message,
                        outcomes=alarm.outcomes, examples=msgspec.to_builtins(alarm.examples))
            write(alarm.record())
        for cleared in self.signal.take_cleared() + self.steps.take_cleared() + self.failures.take_cleared():
            log.info("run_alarm_cleared", kind=cleared.kind, verifier=cleared.verifier, seconds=cleared.seconds)
            write(cleared.record())

    def alerts(self) -> list[str]:
        """One line per alarm holding now (the heartbeat's ``alerts``, the summary's ``alarms``)."""
        return self.signal.alerts() + self.steps.alerts() + self.failures.alerts()

    def summary(self, now: float) -> dict:
        """The summary's alarms: those holding now, each kind's episodes (raised, then cleared or still
        holding) and how long they held."""
        return {
            "alarms": self.alerts(),
            "alarm_counts": dict(self.steps.counts + self.signal.counts + self.failures.counts),
            "alarm_seconds": {**self.steps.edges.seconds(now), **self.signal.edges.seconds(now),
                              **self.failures.edges.seconds(now)},
        }


__all__ = ["RunWatch"]
