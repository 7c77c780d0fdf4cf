"""msgpack codec with strict, typed decoding.

``decode(data, Task)`` either returns a ``Task`` or raises a
``MessageDecodeError`` whose ``reason`` says exactly what was wrong (not
msgpack, wrong field type at ``$.sampling.temperature``, unknown major
version...). Actors turn that error into a dead letter; they never crash on it.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar, Union

import msgspec

from rlvr.protocol.control import Control, DeadLetter, Heartbeat
from rlvr.protocol.samples import Sample, Scored
from rlvr.protocol.tasks import Task
from rlvr.protocol.weights import WeightsAnnouncement

T = TypeVar("T")

# Every wire message type, once: the union below and the decoders derive from it.
MESSAGE_TYPES = (Task, Sample, Scored, WeightsAnnouncement, Heartbeat, Control, DeadLetter)
Message = Union[MESSAGE_TYPES]  # built from the tuple above

# Highest major version this code understands, per message type (all at 1 so far;
# raise one here when its type gains an incompatible version).
SUPPORTED_VERSION: dict[type, int] = dict.fromkeys(MESSAGE_TYPES, 1)


class MessageDecodeError(ValueError):
    """A payload that is not a valid message of the expected type."""

    def __init__(self, kind: Literal["malformed", "schema", "version"], reason: str) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind = kind
        self.reason = reason


class UnsupportedVersionError(MessageDecodeError):
    def __init__(self, type_name: str, got: int, supported: int) -> None:
        super().__init__(
            "version", f"{type_name} v{got} is newer than the supported v{supported}"
        )


_encoder = msgspec.msgpack.Encoder()
_decoders: dict[Any, msgspec.msgpack.Decoder] = {
    t: msgspec.msgpack.Decoder(t) for t in SUPPORTED_VERSION
}
_any_decoder = msgspec.msgpack.Decoder(Message)


def encode(msg: Message) -> bytes:
    return _encoder.encode(msg)


def decode(data: bytes, expected: type[T]) -> T:
    """Decode ``data`` as ``expected``; raise ``MessageDecodeError`` otherwise."""
    decoder = _decoders.get(expected) if expected is not Message else _any_decoder
    if decoder is None:
        raise TypeError(f"{expected!r} is not a wire message type")
    try:
        msg = decoder.decode(data)
    except msgspec.ValidationError as e:
        raise MessageDecodeError("schema", str(e)) from None
    except msgspec.DecodeError as e:
        raise MessageDecodeError("malformed", f"not valid msgpack: {e}") from None
    except RecursionError:
        # Free-form fields (verifier params) accept any msgpack, and msgpack
        # nests arrays one byte per level: a small payload can exhaust the stack.
        raise MessageDecodeError("malformed", "nested too deeply to decode") from None
    supported = SUPPORTED_VERSION[type(msg)]
    if msg.v > supported:
        raise UnsupportedVersionError(type(msg).__name__, msg.v, supported)
    return msg


__all__ = ["Message", "MessageDecodeError", "UnsupportedVersionError", "decode", "encode"]
