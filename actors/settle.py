"""Settling a consumed message without ever taking the actor down: acks, naks and dead letters.

``safely(op)`` runs an ack, nak, term or ``in_progress``: a failure is logged
and counted (``settle_failures``), never fatal, since the server redelivers
after ack_wait, which at-least-once already allows.

``dead_letter_and_term`` publishes the message to DEAD with its reason, then
terms it. A message too large to copy goes to DEAD as a reference (bus.py). A
failed publish to DEAD (a timeout, a full store) is retried while the message
stays un-acked and kept alive with ``in_progress``. A letter that cannot copy
the message's bytes or headers goes bare (reason, stream and sequence only).
Every dead letter is counted by kind (``dead_letter.<kind>``, ``poison_pills``,
``dead_letter_failures``, ``dead_letter_retrying``) in the consumer's
counters, which each role puts in its heartbeat, so ``rlvr-actor status``
shows them.

The consume loop (``rlvr.actors.consume``) is the one caller.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable

import anyio
from nats.aio.msg import Msg

from rlvr.actors.bus import Bus
from rlvr.actors.logs import get_logger
from rlvr.actors.retry import FOREVER, retrying

log = get_logger("rlvr.consume")


async def safely(op: Callable[[], Awaitable[object]], what: str, counters: Counter[str]) -> bool:
    """Ack/nak/term; a failure is logged and counted, never fatal: the
    server redelivers after ack_wait, which at-least-once already allows."""
    try:
        await op()
        return True
    except Exception as e:
        counters["settle_failures"] += 1
        log.warning("settle_failed", op=what, error=repr(e))
        return False


async def dead_letter_and_term(bus: Bus, stage: str, msg: Msg, kind: str, reason: str, error_type: str,
                               counters: Counter[str], *, backoff_max_s: float) -> None:
    """Dead-letter and term ``msg``, retrying the dead letter until it is stored.

    While DEAD refuses it (storage full, timeouts) the message stays
    un-acked and ours (``in_progress``) and the failure shows in the
    counters; a stop cancels the wait and the consume loop naks it back. A
    failure that is not the bus's comes from the message's own bytes or
    headers (the letter copies them): the letter is then sent bare, its
    reason, stream and sequence only, so no message can keep itself out
    of DEAD or take the actor down.
    """
    try:
        reference = await _store(bus, stage, msg, kind, reason, error_type, counters, backoff_max_s, bare=False)
    except Exception as e:
        counters["dead_letter_bare"] += 1
        log.error("dead_letter_copy_failed", kind=kind, error=f"{type(e).__name__}: {e}", stream_seq=stream_seq(msg))
        reference = await _store(bus, stage, msg, kind, f"{reason} (sent bare: {type(e).__name__})", error_type,
                                 counters, backoff_max_s, bare=True)
    await safely(msg.term, "term", counters)
    counters["dead_lettered"] += 1
    counters[f"dead_letter.{kind}"] += 1
    if kind == "poison":
        counters["poison_pills"] += 1
    if reference:
        counters["dead_letter_references"] += 1


async def _store(bus: Bus, stage: str, msg: Msg, kind: str, reason: str, error_type: str, counters: Counter[str],
                 backoff_max_s: float, *, bare: bool) -> bool:
    """``bus.dead_letter``, retried FOREVER on transient faults, the message kept alive meanwhile."""
    failing = False

    async def keep(_: BaseException) -> None:
        nonlocal failing
        counters["dead_letter_failures"] += 1
        if not failing:
            failing = True
            counters["dead_letter_retrying"] += 1
        with anyio.move_on_after(5):
            await safely(msg.in_progress, "in_progress", counters)

    try:
        async for attempt in retrying("dead_letter", until=FOREVER, wait_initial=0.2, wait_max=backoff_max_s,
                                      on_retry=keep, kind=kind, stream_seq=stream_seq(msg)):
            with attempt:
                return await bus.dead_letter(stage, msg, reason, error_type, kind, bare=bare)
    finally:
        if failing:
            counters["dead_letter_retrying"] -= 1
    raise AssertionError("unreachable: retrying FOREVER either returns or raises")


def stream_seq(msg: Msg) -> int | None:
    """The message's stream sequence; None for a message not from JetStream."""
    try:
        return msg.metadata.sequence.stream
    except Exception:  # not a JetStream message
        return None


__all__ = ["dead_letter_and_term", "safely", "stream_seq"]
