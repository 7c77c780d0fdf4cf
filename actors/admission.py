"""Admission: whether a delivered message may reach its handler, decided without a server.

A consumer (``rlvr.actors.consume``) hands every delivery's bytes, headers,
delivery count and stream sequence to ``Admission.admit``, which returns the
decoded message or raises why not:

1. ``MessageRefused("poison")``: delivered more than ``unsettled_limit``
   times and never settled (its holder died or hung with it), unless this
   consumer gave it back itself (``given_back``: a nak, a hold);
2. ``MessageRefused(<decode kind>)`` / ``("invalid")``: it does not decode,
   or fails its family's checks (``validate``, by default
   ``rlvr.protocol.validate.check_message``); a decoder or validator that
   raises anything is a refusal too, never a crash;
3. ``MessageRefused("conflict")``: its id (``sample_id``, ``task_id``, else
   ``Nats-Msg-Id``) was admitted before with other content, and not with
   the same ``meaning`` (the fields that make it the same work);
4. ``MessageRepublished``: where a ``meaning`` is given, a copy that means
   the same under another stream sequence (a task re-issued, a group
   generated again): the caller acks and counts it, and serves the first.

A redelivery of the same stream sequence with the same bytes is admitted
again: only the caller knows whether it still holds the first delivery.
Memory is bounded: the last ``remembered`` ids and given-back sequences.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from rlvr.protocol import MessageDecodeError
from rlvr.protocol.validate import MessageInvalidError, check_message

T = TypeVar("T")
# Dead-letter kinds, the suffix of the ``dead_letter.<kind>`` counters.
DEAD_KINDS = ("malformed", "schema", "version", "invalid", "conflict", "poison", "term")
# Message ids (and stream sequences) one consumer remembers: about 5 MiB at this size (an id is kept as
# its 64-bit keyed hash, what was seen as one packed int). JetStream's own duplicate window catches a
# copy under the same Nats-Msg-Id within it; this memory is for copies published later. It was 65,536
# (tuples under string ids, 20 MiB): a verifier took 47 minutes of the soak to fill it, its RSS +29%.
REMEMBERED = 32_768
_M64 = (1 << 64) - 1


class MessageRefused(Exception):
    """The message must be dead-lettered: ``kind`` (one of ``DEAD_KINDS``), why, and the error's type."""

    def __init__(self, kind: str, reason: str, error_type: str) -> None:
        super().__init__(reason)
        self.kind, self.reason, self.error_type = kind, reason, error_type


class MessageRepublished(Exception):
    """A copy of a message already admitted under another stream sequence: ack it, serve nothing."""

    def __init__(self, msg_id: str) -> None:
        super().__init__(msg_id)
        self.msg_id = msg_id


class Lru:
    """A bounded map that forgets its oldest entries."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[object, object] = OrderedDict()

    def get(self, key: object) -> object | None:
        return self.items.get(key)

    def put(self, key: object, value: object) -> None:
        self.items[key] = value
        self.items.move_to_end(key)
        while len(self.items) > self.size:
            self.items.popitem(last=False)


class Admission(Generic[T]):
    def __init__(
        self,
        decode: Callable[[bytes], T],
        *,
        unsettled_limit: int,
        validate: Callable[[T], None] = check_message,
        meaning: Callable[[T], bytes] | None = None,
        remembered: int = REMEMBERED,
        check_copies: bool = True,
    ) -> None:
        self.decode = decode
        # False: copies under one id are the handler's to judge (the learner's custody keeps one
        # of two conflicting copies by content, not by which came first), and 3. and 4. are skipped.
        self.check_copies = check_copies
        self.validate = validate
        self.unsettled_limit = unsettled_limit
        # What a copy published again must equal to be the same message (a Task
        # re-issued after a restart differs only in when it was issued). None:
        # copies with equal bytes are admitted again and the caller dedups (the
        # learner's ledger must see every sequence).
        self.meaning = meaning
        self._first: Lru = Lru(remembered)  # fingerprint of a message id -> _pack(digest, meaning, seq) of its first copy
        self._given_back: Lru = Lru(remembered)  # stream seqs this consumer nak'ed or held

    def given_back(self, stream_seq: int | None) -> None:
        """This consumer returned or kept the message at ``stream_seq``: its next
        deliveries are not a sign that a holder died with it."""
        self._given_back.put(stream_seq, True)

    def admit(self, data: bytes, headers: Mapping[str, str], *, num_delivered: int, stream_seq: int | None) -> T:
        """The decoded, validated message; ``MessageRefused`` or ``MessageRepublished`` when not."""
        if num_delivered > self.unsettled_limit and self._given_back.get(stream_seq) is None:
            raise MessageRefused(
                "poison",
                f"poison pill: delivered {num_delivered} times and never settled (its holder died or hung with "
                f"it); poison_after={self.unsettled_limit}",
                "PoisonPill",
            )
        try:
            obj = self.decode(data)
        except MessageDecodeError as e:
            raise MessageRefused(e.kind, e.reason, f"MessageDecodeError:{e.kind}") from None
        except Exception as e:  # a decoder must never take the actor down
            raise MessageRefused("malformed", f"{type(e).__name__}: {e}", type(e).__name__) from None
        try:
            self.validate(obj)
        except MessageInvalidError as e:
            raise MessageRefused("invalid", e.reason, "MessageInvalidError") from None
        except Exception as e:
            raise MessageRefused("invalid", f"{type(e).__name__}: {e}", type(e).__name__) from None
        msg_id = identity(obj) or headers.get("Nats-Msg-Id")
        if msg_id and self.check_copies:
            self._check_copy(msg_id, obj, data, stream_seq)
        return obj

    def _check_copy(self, msg_id: str, obj: T, data: bytes, stream_seq: int | None) -> None:
        # Equal bytes always mean the same, so where a meaning is given it alone
        # decides (other bytes, same meaning: a copy; other meaning: a conflict),
        # and the message's own bytes need no hash.
        digest = meaning = fingerprint(self.meaning(obj) if self.meaning is not None else data)
        # The id itself is not kept, only its keyed 64-bit hash: two ids colliding within the window
        # (about 2^-49 for a new id among 32,768) would read as a conflict, never as a silent drop.
        key = fingerprint(msg_id.encode())
        seen = self._first.get(key)
        if seen is None:
            self._first.put(key, _pack(digest, meaning, stream_seq))
            return
        first_digest, first_meaning, first_seq = _unpack(seen)  # type: ignore[arg-type]
        digest, meaning = digest & _M64, meaning & _M64
        if first_digest != digest and first_meaning != meaning:
            raise MessageRefused(
                "conflict",
                f"id {msg_id!r} was already received with other content (published again, past "
                "the duplicate window or under another Nats-Msg-Id, and not the same message)",
                "ConflictingDuplicate",
            )
        if self.meaning is not None and first_seq != stream_seq:
            raise MessageRepublished(msg_id)


def _pack(digest: int, meaning: int, seq: int | None) -> int:
    """Three values as one int (about 52 bytes; a tuple of three is about 160)."""
    return (digest & _M64) | ((meaning & _M64) << 64) | ((0 if seq is None else seq + 1) << 128)


def _unpack(packed: int) -> tuple[int, int, int | None]:
    seq = packed >> 128
    return packed & _M64, (packed >> 64) & _M64, None if seq == 0 else seq - 1


def fingerprint(data: bytes) -> int:
    """Tells two copies of a message apart within this process: Python's bytes
    hash (SipHash, keyed per process, so a publisher cannot aim a collision),
    a few times cheaper than a cryptographic digest on a 10 KB sample."""
    return hash(bytes(data))


def identity(obj: object) -> str | None:
    """The stable id a message is published under (its ``Nats-Msg-Id``)."""
    sid = getattr(obj, "sample_id", None)  # Sample, Scored
    if isinstance(sid, str):
        return sid
    tid = getattr(obj, "task_id", None)  # Task
    return tid if isinstance(tid, str) else None


__all__ = ["DEAD_KINDS", "Admission", "MessageRefused", "MessageRepublished", "fingerprint", "identity"]
