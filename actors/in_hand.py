"""The messages a consumer has in hand, and the one ticker that keeps them alive.

A message is in hand from the pull that brought it until its outcome is settled; one its handler
keeps (``Hold``) stays until it is released. JetStream redelivers any of them whose last sign of
life is older than ``ack_wait``, so the ticker sends ``in_progress`` for each one ``every_s`` after
its last (``rlvr.actors.consume`` bounds ``every_s`` at a third of ``ack_wait``). Where that could
still miss, and what happens then:

- The server's clock starts when it delivers, before this process sees the message (a pull that
  returns late, a busy loop): a message's first sign of life is the time its pull was asked for.
- The ticker runs on the event loop. A loop that does not run for about ``ack_wait - every_s``
  (a long GC pause, a blocking call, a process starved of CPU; issue 44's busy machine) sends
  nothing, and the server may redeliver. The ticker measures every stall and says one past half
  of that (``keep_alive_stalled``, counted ``keep_alive_stalls``): the other half is slack for the
  server's own delays on a busy machine, so a stall that let a message be redelivered is said.
- A redelivery of a message still being handled is absorbed (counted ``redelivered_in_hand``): the
  new delivery becomes the one kept alive and settled (JetStream keys acks and ``in_progress`` by
  stream sequence, so either settles the message, and the newest also after a durable was
  recreated), the handler is not run twice, and its climbing delivery count is never read as a
  holder that died: a stalled loop cannot turn good work into a poison pill. A redelivery to
  another replica is at-least-once's duplicate, nothing more.

A message held by its handler (``Hold``) that comes back is handed to the handler again, which
knows it (the learner's custody), as before. Not in hand yet, so not kept alive: a message the
server delivered after its fetch returned (nats-py's pull request outlives the fetch: measured, a
message published 0.5 s into a 1 s fetch that had returned with the one before it) waits in the
client's queue for the next pull, at once unless every slot is busy; a redelivery of it once
taken is absorbed like any other.
"""

from __future__ import annotations

import time
from collections import Counter

import anyio
from nats.aio.msg import Msg

from rlvr.actors.logs import get_logger
from rlvr.actors.settle import safely

log = get_logger("rlvr.consume")


class Entry:
    """One message in hand: the delivery to keep alive and settle, its last sign of life
    (``time.monotonic``), and whether a handler (or ``forward``) still has it (False: ``Hold``)."""

    __slots__ = ("alive_at", "handling", "msg")

    def __init__(self, msg: Msg, alive_at: float) -> None:
        self.msg, self.alive_at, self.handling = msg, alive_at, True


class InHand:
    def __init__(self, counters: Counter[str], *, stage: str, ack_wait_s: float) -> None:
        self.counters = counters
        self.stage = stage
        self.ack_wait_s = ack_wait_s
        # stream seq -> the message in hand (None: a message without one, never from JetStream)
        self._entries: dict[int | None, Entry] = {}

    def take(self, key: int | None, msg: Msg, asked_at: float) -> Entry | None:
        """``msg`` in hand from now (its pull asked for at ``asked_at``); None when it is a redelivery
        of a message still being handled, absorbed into it."""
        entry = self._entries.get(key)
        if entry is not None and entry.handling:
            entry.msg, entry.alive_at = msg, max(entry.alive_at, asked_at)
            self.counters["redelivered_in_hand"] += 1
            log.warning("redelivered_in_hand", stage=self.stage, stream_seq=key,
                        deliveries=_deliveries(msg), ack_wait_s=self.ack_wait_s,
                        note="its keep-alive came too late (see keep_alive_stalled); the handler in hand "
                             "goes on and settles it once")
            return None
        entry = Entry(msg, asked_at)
        self._entries[key] = entry  # a redelivery of a held (``Hold``) message takes its place
        return entry

    def done(self, key: int | None, entry: Entry, *, held: bool = False) -> None:
        """``entry``'s handler is done: settled (forgotten), or ``held`` (kept alive until ``release``)."""
        if self._entries.get(key) is entry:
            if held:
                entry.handling = False
            else:
                del self._entries[key]

    def release(self, key: int) -> Entry | None:
        """The held message at ``key``, no longer in hand; None when none is."""
        return self._entries.pop(key, None)

    def sequences(self) -> list[int]:
        return [seq for seq in self._entries if seq is not None]

    def __len__(self) -> int:
        return len(self._entries)

    async def keep_alive(self, every_s: float) -> None:
        """The one ticker: ``in_progress`` for each message ``every_s`` after its last sign of life;
        a stall of the loop past the margin is said, since the server may then redeliver."""
        tick = every_s / 4
        margin = (self.ack_wait_s - every_s) / 2  # every_s <= ack_wait / 3: at least a third of ack_wait
        last = time.monotonic()
        while True:
            await anyio.sleep(tick)
            now = time.monotonic()
            stalled, last = now - last - tick, now
            if stalled > margin and self._entries:
                self.counters["keep_alive_stalls"] += 1
                log.warning("keep_alive_stalled", stage=self.stage, stalled_s=round(stalled, 3),
                            margin_s=round(margin, 3), ack_wait_s=self.ack_wait_s, in_hand=len(self._entries),
                            note="this process's event loop did not run; the server may redeliver what it holds")
            for entry in list(self._entries.values()):
                if now - entry.alive_at >= every_s:
                    entry.alive_at = now
                    await safely(entry.msg.in_progress, "in_progress", self.counters)


def _deliveries(msg: Msg) -> int | None:
    try:
        return msg.metadata.num_delivered
    except Exception:  # a log field is never worth a fault
        return None


__all__ = ["Entry", "InHand"]
