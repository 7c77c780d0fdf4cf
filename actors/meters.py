"""Small in-process meters for heartbeats: rates over a window, latency quantiles."""

from __future__ import annotations

import math
import time
from collections import deque


def quantile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ``sorted_values`` (ascending); 0.0 for no data.

    The one quantile the project reports (heartbeats, the pool's stats, audit):
    the smallest value with at least a ``q`` share of the values at or below it."""
    if not sorted_values:
        return 0.0
    return sorted_values[max(1, math.ceil(q * len(sorted_values))) - 1]


class RateMeter:
    """Events (or tokens) per second over the last ``window_s`` seconds."""

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self._events: deque[tuple[float, float]] = deque()
        self.total = 0.0

    def add(self, amount: float = 1.0, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._events.append((now, amount))
        self.total += amount
        self._trim(now)

    def rate(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        self._trim(now)
        if not self._events:
            return 0.0
        span = max(now - self._events[0][0], 1.0)
        return sum(a for _, a in self._events) / span

    def _trim(self, now: float) -> None:
        while self._events and now - self._events[0][0] > self.window_s:
            self._events.popleft()


class LatencyMeter:
    """p50/p99 over the last ``size`` observations."""

    def __init__(self, size: int = 2048) -> None:
        self._values: deque[float] = deque(maxlen=size)

    def add(self, value: float) -> None:
        self._values.append(value)

    def quantile(self, q: float) -> float:
        return quantile(sorted(self._values), q)
