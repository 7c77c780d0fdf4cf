"""When an alarm speaks: on the rising edge of its condition, once more when it clears, never in between.

A condition evaluated on every group or step flickers near its threshold: a
``flat_reward`` share that sits at 0.9 is on, off and on again from one group
to the next, and an alarm raised at every rise said the same thing 35 times in
one calculator run. ``AlarmEdges`` owns the alarms' state for one watch
(``SignalWatch``, ``StepWatch``) and gives it hysteresis in time: an alarm is
raised when its condition starts to hold, stays active while it holds, and
clears only after its condition has been false for ``clear_after`` checks in
a row; a single quiet check in the middle of a bad stretch clears nothing.

Each alarm episode (a raise up to its clear) is counted by kind, with how long
it held: the summary reports both (``alarm_counts``, ``alarm_seconds``).
Pure: the caller passes the time and says what to do with the edges.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec
from msgspec import Struct

Key = Any  # a watch's own key of one alarm: its kind, or (kind, verifier)


class AlarmCleared(Struct, frozen=True):
    kind: str
    verifier: str
    message: str  # the alarm's last message: what it was about
    seconds: float  # how long it held, from its raise to its clear

    def record(self) -> dict:
        """The metrics.jsonl line for this clear."""
        return {"event": "alarm_cleared", **msgspec.to_builtins(self)}


class AlarmEdges:
    def __init__(self, clear_after: int) -> None:
        self.clear_after = clear_after
        self.active: dict[Key, Any] = {}  # the alarms holding now (an ``alarms.Alarm`` each)
        self.counts: Counter[str] = Counter()  # alarm episodes (raises) by kind
        self._seconds: Counter[str] = Counter()  # time held by the kind's cleared episodes
        self._since: dict[Key, float] = {}  # when each active alarm was raised
        self._verifier: dict[Key, str] = {}  # the verifier each active alarm named when raised
        self._quiet: dict[Key, int] = {}  # checks in a row each active alarm's condition was false
        self._cleared: list[AlarmCleared] = []

    def update(self, current: dict[Key, Any], now: float) -> list:
        """One check: ``current`` are the alarms whose condition holds now. Returns the ones
        raised (rising edges); a clear (falling edge) is kept for ``take_cleared``."""
        raised = [alarm for key, alarm in current.items() if self.hold(key, alarm, now)]
        for key in [k for k in self.active if k not in current]:
            self._quiet[key] += 1
            if self._quiet[key] >= self.clear_after:
                self.clear(key, now)
        return raised

    def hold(self, key: Key, alarm: Any, now: float) -> bool:
        """One alarm's condition holds now (the others unchecked); True when that is its rising edge."""
        new = key not in self.active
        if new:
            self.counts[alarm.kind] += 1
            self._since[key] = now
            self._verifier[key] = alarm.verifier
        self.active[key] = alarm  # the message follows the numbers while it holds
        self._quiet[key] = 0
        return new

    def clear(self, key: Key, now: float) -> None:
        """Clear an active alarm now, whatever its quiet count (a round that says it is over)."""
        alarm = self.active.pop(key, None)
        if alarm is None:
            return
        held = max(0.0, now - self._since.pop(key))
        self._quiet.pop(key, None)
        self._seconds[alarm.kind] += held
        # The verifier of its raise: what a display keyed the alarm by.
        verifier = self._verifier.pop(key, alarm.verifier)
        self._cleared.append(AlarmCleared(alarm.kind, verifier, alarm.message, round(held, 3)))

    def take_cleared(self) -> list[AlarmCleared]:
        """The clears since the last call (each is said once)."""
        out, self._cleared = self._cleared, []
        return out

    def seconds(self, now: float) -> dict[str, float]:
        """Seconds each kind has held over the run, an alarm still active counted up to ``now``."""
        total = Counter(self._seconds)
        for key, alarm in self.active.items():
            total[alarm.kind] += max(0.0, now - self._since[key])
        return {k: round(v, 1) for k, v in total.items()}


__all__ = ["AlarmCleared", "AlarmEdges"]
