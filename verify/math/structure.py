"""Split a cleaned answer into its shape: a scalar, an ordered tuple or
interval (with its brackets), an unordered collection (a set, a bare list
``1, -2``, a union of intervals, a ``\\pm`` pair) or a matrix.

Brackets are kept, because ``(1,2)`` and ``[1,2]`` differ and ``(1,2)`` and
``(2,1)`` differ; whether ``(1,2)`` is an open interval or a point does not
matter, since both readings compare the same way (ordered, same brackets).
Nothing here compares values; see ``equivalence``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from rlvr.verify.math.normalize import matching_close, split_top

Kind = Literal["scalar", "ordered", "unordered", "matrix"]
MAX_ITEMS = 64

_MATRIX = re.compile(r"^\\begin\{([pbvBV]?matrix|array)\}(?:\{[^{}]*\})?(.*)\\end\{\1\}$", re.S)
_MEMBER = re.compile(r"^[a-zA-Z]\s*\\in\s*")
_WORD_SEP = re.compile(r"\s+(?:and|or)\s+|;")


@dataclass(frozen=True)
class Shape:
    kind: Kind
    items: tuple[str, ...] = ()
    brackets: str = ""  # "()", "[]", "(]", "[)" or "<>" for ordered shapes
    rows: tuple[tuple[str, ...], ...] = ()  # matrix cells


def _expand_pm(text: str) -> list[str] | None:
    for sign in ("\\pm", "\\mp"):
        parts = split_top(text, sign)
        if len(parts) == 2:
            head, tail = parts
            if not tail:
                return None
            plus, minus = (f"{head}+({tail})", f"{head}-({tail})")
            if not head:
                plus, minus = f"{tail}", f"-({tail})"
            return [plus, minus] if sign == "\\pm" else [minus, plus]
    return None


def _bracketed(text: str) -> tuple[str, str, str] | None:
    """``(open, inner, close)`` when one bracket pair encloses all of text."""
    if text.startswith("\\langle") and text.endswith("\\rangle"):
        return "<", text[len("\\langle") : -len("\\rangle")], ">"
    if text.startswith("\\{") and text.endswith("\\}"):
        return "{", text[2:-2], "}"
    if len(text) >= 2 and text[0] in "([" and text[-1] in ")]" and matching_close(text, 0) == len(text) - 1:
        return text[0], text[1:-1], text[-1]
    return None


def shape_of(text: str) -> Shape:
    text = text.strip()
    m = _MATRIX.match(text)
    if m is not None:
        rows = tuple(
            tuple(cell.strip() for cell in row.split("&"))
            for row in re.split(r"\\\\", m.group(2))
            if row.strip()
        )
        return Shape("matrix", rows=rows)
    text = _MEMBER.sub("", text)
    union = split_top(text, "\\cup")
    if len(union) > 1:
        return Shape("unordered", tuple(union[:MAX_ITEMS]))
    bracketed = _bracketed(text)
    if bracketed is not None:
        left, inner, right = bracketed
        parts = split_top(inner)
        if left == "{":
            return Shape("unordered", tuple(_expand_all(parts)))
        if len(parts) == 1 and left + right in ("()", "[]"):
            return shape_of(inner)
        return Shape("ordered", tuple(parts[:MAX_ITEMS]), left + right)
    parts = split_top(_WORD_SEP.sub(",", text))
    parts = [p for p in parts if p]
    if len(parts) > 1:
        return Shape("unordered", tuple(_expand_all(parts)))
    pm = _expand_pm(text)
    if pm is not None:
        return Shape("unordered", tuple(pm))
    return Shape("scalar", (text,))


def _expand_all(parts: list[str]) -> list[str]:
    out: list[str] = []
    for part in parts[:MAX_ITEMS]:
        out.extend(_expand_pm(part) or [part])
    return out


__all__ = ["Shape", "shape_of"]
