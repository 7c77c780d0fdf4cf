"""msgpack codec with strict, typed decoding.

``decode(data, Task)`` either returns a ``Task`` or raises a
``MessageDecodeError`` whose ``reason`` says exactly what was wrong (not
msgpack, wrong field type at ``$.sampling.temperature``, unknown major
version...). Actors turn that error into a dead letter; they never crash on it.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Literal, TypeVar, Union

import msgspec
import msgspec.inspect as mi

from rlvr.protocol.control import Control, DeadLetter, Heartbeat
from rlvr.protocol.groups import GroupBody, SampleGroup, ScoredGroup
from rlvr.protocol.samples import Sample, Scored
from rlvr.protocol.tasks import Task
from rlvr.protocol.weights import WeightsAnnouncement

T = TypeVar("T")

# Every wire message type, once: the union below and the decoders derive from it.
# GroupBody travels in the object store, not on a subject (actors/bodies.py), but decodes the same way.
MESSAGE_TYPES = (Task, Sample, Scored, SampleGroup, ScoredGroup, GroupBody, WeightsAnnouncement, Heartbeat, Control,
                 DeadLetter)
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
        raise MessageDecodeError("schema", _named(str(e), expected)) from None
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


_AT = re.compile(r"at `\$([^`]*)`$")
_STEP = re.compile(r"\.([A-Za-z_]\w*)|\[(\d+)\]")


def _named(reason: str, expected: Any) -> str:
    """msgspec's reason with the positions of ``array_like`` structs named:
    ``$.completion[1][3]`` reads ``$.completion.logprobs[3]``."""
    m = _AT.search(reason)
    if m is None:
        return reason
    path, out, info, end = m.group(1), "$", _type_info(expected), 0
    for step in _STEP.finditer(path):
        if step.start() != end:
            return reason  # a step this does not follow (a dict key): leave the path as msgspec wrote it
        end = step.end()
        name, index = step.group(1), step.group(2)
        info = _member(info, name)
        if name is not None:
            out += f".{name}"
            fields = info.fields if isinstance(info, mi.StructType) else ()
            info = next((f.type for f in fields if f.encode_name == name), None)
        elif isinstance(info, mi.StructType) and info.array_like and int(index) < len(info.fields):
            out += f".{info.fields[int(index)].name}"
            info = info.fields[int(index)].type
        else:
            out += f"[{index}]"
            info = getattr(info, "item_type", None)
    if end != len(path):
        return reason
    return reason[: m.start(1) - 1] + out + reason[m.end(1):]


@functools.cache
def _type_info(t: Any) -> mi.Type:
    return mi.type_info(t)


def _member(info: Any, name: str | None) -> Any:
    """The member of a union (an optional field, the message union) the next
    step goes into: a struct with field ``name``, or a container for an index."""
    if not isinstance(info, mi.UnionType):
        return info
    for t in info.types:
        if name is not None and isinstance(t, mi.StructType) and any(f.encode_name == name for f in t.fields):
            return t
        if name is None and isinstance(t, (mi.StructType, mi.ListType)):
            return t
    return info


__all__ = ["Message", "MessageDecodeError", "UnsupportedVersionError", "decode", "encode"]
