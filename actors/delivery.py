"""What a consume-loop handler gets and gives back: the message it holds and its outcome.

Each message ends in exactly one outcome (``Ack``, ``Nak``, ``Term``, or
``Hold`` when the handler keeps custody); ``Delivery`` is what a handler
knows about the message. The loop itself, and why, is ``rlvr.actors.consume``,
which re-exports these names.
"""

from __future__ import annotations

import time
from collections import Counter

import msgspec
from nats.aio.msg import Msg

from rlvr.actors.tracing import extract_context


class Ack(msgspec.Struct, frozen=True):
    pass


class Nak(msgspec.Struct, frozen=True):
    delay_s: float = 0.0
    reason: str = ""


class Term(msgspec.Struct, frozen=True):
    reason: str
    error_type: str = "Term"
    kind: str = "term"  # the counter key: dead_letter.<kind>


class Hold(msgspec.Struct, frozen=True):
    """The handler took custody: it will ack or nak the message itself later
    (the learner acks samples only once a checkpoint holds their step)."""


Outcome = Ack | Nak | Term | Hold


class Forward(msgspec.Struct, frozen=True):
    """A consumer's ``forward`` result: publish ``message`` to ``subject``, then
    ack the input once its PubAck is back (a hop that turns one message into
    another, the verifier's fast path). ``headers`` are the output's, with its
    ``Nats-Msg-Id`` and ``traceparent`` (``Bus.headers_for``)."""

    subject: str
    message: object
    headers: dict[str, str]


class ConsumerUnavailableError(RuntimeError):
    """Pulling from the durable consumer kept failing past ``bus.topology_wait_s``."""


class ActorFatalError(RuntimeError):
    """Raised by a handler when the actor itself cannot go on (its engine died).

    The message in hand is nak'ed for another replica, and the error ends the
    actor with a non-zero exit instead of failing every message after it.
    """


class Delivery:
    """What a handler knows about the message it holds."""

    __slots__ = ("headers", "msg", "num_delivered", "received_at", "stored_at", "stream_seq", "trace_context")

    def __init__(self, msg: Msg) -> None:
        self.msg = msg
        meta = msg.metadata
        self.num_delivered: int = meta.num_delivered
        self.stream_seq: int = meta.sequence.stream
        self.headers: dict[str, str] = dict(msg.headers or {})
        self.received_at = time.time()
        # When the server stored it (unix seconds, the server's clock): the stream's own time.
        self.stored_at: float | None = meta.timestamp.timestamp() if meta.timestamp else None
        # The producer's span context: a handler starts its span with
        # ``context=delivery.trace_context`` to continue the trajectory's trace.
        self.trace_context = extract_context(self.headers)

    async def in_progress(self) -> None:
        await self.msg.in_progress()


class ConsumerStats:
    def __init__(self) -> None:
        # ``dead_letter_retrying`` is a level (messages whose dead letter is
        # failing right now); every other entry only grows.
        self.counters: Counter[str] = Counter(
            {k: 0 for k in ("received", "acked", "naked", "dead_lettered", "duplicates", "faults", "bus_retries",
                            "pull_failures", "keep_alive_stalls", "redelivered_in_hand",
                            "poison_pills",
                            "dead_letter_failures", "dead_letter_retrying", "settle_failures")}
        )
        self.in_flight = 0
