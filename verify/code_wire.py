"""Plain values across the sandbox boundary: a small tagged-JSON codec.

The code verifier moves call arguments into the sandbox and return values out
of it as text in this form, and nothing else. Decoding builds fresh objects of
the plain types only, so whatever a program returned, what the test code and
the verifier compare afterwards has the builtin ``==``, ``hash`` and ``bool``:

- ``None``, ``bool``, ``int``, ``float`` and ``str`` are JSON scalars;
- a ``list`` is a JSON array;
- every other type is a one-key JSON object, its key the tag: ``{"t": [..]}``
  tuple, ``{"d": [[k, v], ..]}`` dict (keys of any plain hashable type),
  ``{"s": [..]}`` set, ``{"fs": [..]}`` frozenset, ``{"f": "inf"}``
  non-finite float, ``{"c": [re, im]}`` complex, ``{"b": "<hex>"}`` bytes,
  ``{"i": "<hex>"}`` an int too long for a decimal JSON number (Python caps
  int/str conversion at 4300 digits; hex is exempt).

Dict items keep their order (a program may depend on it). With
``canonical=True`` set elements and dict items are sorted by their encoded
text, so equal plain values of the same types encode to the same text and a
long value can travel as its sha256 (``digest``).

``json_only=True`` is the LeetCode/LiveCodeBench rule: tuples become lists,
and sets, bytes, complex numbers and dicts with non-str keys are not plain
data. ``lenient=True`` (used only inside the candidate's process, where it
makes honest programs work and buys an attacker nothing) also accepts the
dict and tuple subclasses of ``collections`` (``Counter``, ``OrderedDict``,
``defaultdict``, a ``namedtuple``) as their base type. Anything else, a
subclass of a plain type included, raises ``NotPlainError``.

This file imports only the standard library: it is also copied into the
sandbox, where ``rlvr`` is not installed. It does not compare values; see
``rlvr.verify.code_tests``.
"""

import collections
import hashlib
import json
import math

MAX_DEPTH = 100  # nesting levels; deeper values are not plain data
MAX_HEX_DIGITS = 1 << 20  # 4 Mbit ints; more is a denial of service, not an answer
_BIG = 1 << 4000  # about 1200 decimal digits: beyond this an int goes as hex
_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
_LENIENT_DICTS = (collections.Counter, collections.OrderedDict, collections.defaultdict)


class NotPlainError(ValueError):
    """A value (or wire text) that is not plain data."""


def _dumps(data) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def to_data(x, *, json_only: bool = False, lenient: bool = False, canonical: bool = False, depth: int = 0):
    """The JSON-able tagged tree of ``x``; raises ``NotPlainError``."""
    if depth > MAX_DEPTH:
        raise NotPlainError(f"nested deeper than {MAX_DEPTH} levels")
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is int:
        return x if -_BIG < x < _BIG else {"i": hex(x)}
    if t is float:
        return x if math.isfinite(x) else {"f": repr(x)}
    kw = {"json_only": json_only, "lenient": lenient, "canonical": canonical, "depth": depth + 1}
    if t is list:
        return [to_data(v, **kw) for v in x]
    if t is tuple or (lenient and isinstance(x, tuple) and hasattr(t, "_fields")):
        items = [to_data(v, **kw) for v in tuple.__iter__(x)]
        return items if json_only else {"t": items}
    if t is dict or (lenient and t in _LENIENT_DICTS):
        if json_only and any(type(k) is not str for k in dict.keys(x)):
            raise NotPlainError("not plain data: a dict with non-str keys")
        pairs = [[to_data(k, **kw), to_data(v, **kw)] for k, v in dict.items(x)]
        return {"d": sorted(pairs, key=lambda p: _dumps(p[0])) if canonical else pairs}
    if not json_only:
        if t is set or t is frozenset:
            items = [to_data(v, **kw) for v in x]
            items = sorted(items, key=_dumps) if canonical else items
            return {"s" if t is set else "fs": items}
        if t is complex:
            return {"c": [to_data(x.real, **kw), to_data(x.imag, **kw)]}
        if t is bytes:
            return {"b": x.hex()}
    raise NotPlainError(f"not plain data: {t.__name__[:80]}")


def encode(x, *, json_only: bool = False, lenient: bool = False, canonical: bool = True) -> str:
    """Wire text of ``x`` (canonical unless told); raises ``NotPlainError``."""
    return _dumps(to_data(x, json_only=json_only, lenient=lenient, canonical=canonical))


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def from_data(d, depth: int = 0):
    """Fresh plain objects from a decoded JSON tree; raises ``NotPlainError``."""
    if depth > MAX_DEPTH:
        raise NotPlainError(f"nested deeper than {MAX_DEPTH} levels")
    t = type(d)
    if d is None or t in (bool, int, float, str):
        return d
    if t is list:
        return [from_data(v, depth + 1) for v in d]
    if t is not dict or len(d) != 1:
        raise NotPlainError("bad wire value")
    (tag, v), = d.items()
    try:
        if tag in ("t", "s", "fs") and type(v) is list:
            items = [from_data(x, depth + 1) for x in v]
            return tuple(items) if tag == "t" else set(items) if tag == "s" else frozenset(items)
        if tag == "d" and type(v) is list:
            out = {}
            for pair in v:
                if type(pair) is not list or len(pair) != 2:
                    raise NotPlainError("bad dict item")
                out[from_data(pair[0], depth + 1)] = from_data(pair[1], depth + 1)
            return out
        if tag == "f" and v in _NONFINITE:
            return _NONFINITE[v]
        if tag == "c" and type(v) is list and len(v) == 2:
            re, im = (from_data(x, depth + 1) for x in v)
            if type(re) is float and type(im) is float:
                return complex(re, im)
        if tag == "b" and type(v) is str:
            return bytes.fromhex(v)
        if tag == "i" and type(v) is str and len(v) <= MAX_HEX_DIGITS:
            return int(v, 16)
    except (TypeError, ValueError) as e:  # unhashable key, bad hex
        raise NotPlainError(f"bad wire value: {type(e).__name__}") from None
    raise NotPlainError(f"bad wire value (tag {str(tag)[:20]!r})")


def decode(text: str):
    """Fresh plain objects from wire text; raises ``NotPlainError``."""
    try:
        tree = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise NotPlainError(f"bad wire text: {type(e).__name__}") from None
    return from_data(tree)


def to_json_plain(x):
    """``x`` (already plain) under the JSON rule: tuples become lists; raises
    ``NotPlainError`` for anything JSON has no form for."""
    return from_data(json.loads(encode(x, json_only=True)))
