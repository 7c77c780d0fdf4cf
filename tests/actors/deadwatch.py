"""Wait on a consumer's dead letters as they happen, not by polling its counters.

``DeadLetterWatch(bus)`` wraps ``bus.dead_letter``, the one call through which
the consume loop publishes a letter to DEAD, and counts each call as it
begins (``attempts``) and ends: stored (the server acknowledged the letter)
or refused (the publish raised, and the loop keeps the message and retries).
Every change wakes ``until``'s waiters; nothing polls or sleeps. The real
call still does all the work, against the real server.

A letter stored is not yet the end of its message: the loop then terms it
and counts it. Stop the consumer after ``until`` returns: the drain waits
for every message in hand, so its counters are final once ``run`` returns.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from rlvr.actors.bus import Bus


class DeadLetterWatch:
    def __init__(self, bus: Bus) -> None:
        self.attempts = self.stored = self.refused = 0
        self._changed = anyio.Event()
        real = bus.dead_letter

        async def dead_letter(*args, **kwargs) -> bool:
            self.attempts += 1
            self._notify()
            try:
                reference = await real(*args, **kwargs)
            except Exception:  # not a cancellation: that is no refusal
                self.refused += 1
                self._notify()
                raise
            self.stored += 1
            self._notify()
            return reference

        bus.dead_letter = dead_letter  # the Consumer calls it through the instance

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def until(self, holds: Callable[[DeadLetterWatch], object]) -> None:
        """Return once ``holds(self)`` is true, re-checked on each change (bound it with ``fail_after``)."""
        while not holds(self):
            await self._changed.wait()
