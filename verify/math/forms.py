"""Written forms of one answer that say the same thing another way, read
before comparison. Each is a named policy of ``policy``'s layer:

- ``ratio``: ``V_1:V_2 = 11:21`` (a labelled ratio), ``11:21`` and
  ``a:b:c = 2:3:4`` are ratios of plain numbers (``ratio_of``); two ratios
  compare term by term up to a common factor (``ratios_equal``: ``22:42`` is
  ``11:21``, as math-verify reads a 2-term ratio as a quotient), with the
  same number of terms. math-verify reads ``1:2:3`` as ``(1/2)/3``, so
  ``1:6:1`` would equal it; here it does not. Whether a bare ``11:21`` is a
  time of day is the scorer's question (``policy.time_of``); a labelled one
  never is.
- ``solution_list`` (text, in ``policy.localise``): solutions separated by
  ``;``, ``\\quad\\text{and}\\quad``, ``\\text{ or }`` become one comma list,
  and a label shared by every item (``(x, y) =``) goes: ``(x, y) = (1, 2);
  (x, y) = (3, 4)`` reads ``(1, 2), (3, 4)``. Items with different labels
  (``x = 1; y = 2``) keep them.
- ``range`` (text, in ``policy.localise``): "between 12 and 13", however
  boxed (``\\text{between } 12 \\text{ and } 13``, "from 7 to 8"), reads as the
  list ``12, 13``, as math-verify reads ``12\\text{ and }13``. A dash
  (``12-13``) stays arithmetic.
- ``structure_value``: a matrix, tuple or interval with a name on the left
  (``A^{-1} = \\begin{pmatrix}...``, ``\\mathbf{v} = ...``), without the name.

Not covered: ratios of symbols (``x:y``) or with words ("11 to 21"),
ranges of expressions (``\\sqrt{2}`` to ``2``), lists separated by words other
than "and"/"or". This module only rewrites and reads text; it does not parse
LaTeX into values (``engine``) or decide (``scorer``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from rlvr.verify.math.numbers import parse_number

# A term of a ratio label: a name, not a number ("V_1", "AB", "[ABC]", "\text{red}", "\angle A").
_LABEL_TERM = re.compile(r"^(?=.*[A-Za-z])[^=:;,$]{1,30}$")
_COLON = re.compile(r"\s*(?:\\colon|:)\s*")
_QUOTIENT = re.compile(r"^\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}$|^([^/{}]+)/([^/{}]+)$")
_TEXT = re.compile(r"\\(?:text|textbf|textit|mbox|mathrm)\s*\{([^{}]*)\}")
_SPACES = re.compile(r"\\[,;: !]|\\q?quad\b|~")


@dataclass(frozen=True)
class Ratio:
    terms: tuple[Fraction, ...]
    labelled: bool


def _plain(text: str) -> str:
    text = _TEXT.sub(r" \1 ", text.replace("$", " "))
    text = re.sub(r"\\(?:left|right)\b", "", text)
    return re.sub(r"\s+", " ", _SPACES.sub(" ", text)).strip()


def _numbers(parts: list[str]) -> tuple[Fraction, ...] | None:
    values = []
    for part in parts:
        n = parse_number(part)
        if n is None:
            return None
        values.append(n.value)
    return tuple(values)


def ratio_of(span: str) -> Ratio | None:
    """The ratio written as ``span`` (see the module docstring), or None."""
    if ":" not in span and "colon" not in span and "=" not in span:
        return None  # the common case, without a regex
    text = _plain(span).rstrip(".")
    if text.count("=") > 1:
        return None
    label, _, value = text.rpartition("=")
    label, value = label.strip(), value.strip()
    if label:
        names = _COLON.split(label)
        if len(names) < 2:  # \frac{V_1}{V_2} = \frac{11}{21}
            m, v = _QUOTIENT.match(label), _QUOTIENT.match(value)
            if m is None or v is None:
                return None
            names = [g for g in m.groups() if g is not None]
            parts = [g for g in v.groups() if g is not None]
        else:
            parts = _COLON.split(value)
        if len(names) != len(parts) or not all(_LABEL_TERM.match(n.strip()) for n in names):
            return None
    else:
        parts = _COLON.split(value)
    if len(parts) < 2:
        return None
    terms = _numbers(parts)
    if terms is None or not any(terms):
        return None
    return Ratio(terms, labelled=bool(label))


def ratios_equal(a: Ratio, b: Ratio) -> bool:
    """Same number of terms, proportional (every cross product equal)."""
    if len(a.terms) != len(b.terms):
        return False
    return all(x * b.terms[j] == a.terms[j] * y for j in range(len(a.terms)) for x, y in zip(a.terms, b.terms))


# A separator between solutions: ";" or "and"/"or" in words, with any \quad around it.
_WORD_SEPARATOR = re.compile(
    r"(?:\s|\\q?quad\b|\\[,;: ]|~)*"
    r"(?:\\(?:text|textrm|mbox|mathrm)\s*\{\s*(?:and|or|;|,)\s*\}|(?<=[\s)\]}$])(?:and|or)(?=[\s($\\]))"
    r"(?:\s|\\q?quad\b|\\[,;: ]|~)*"
)
_ITEM_LABEL = re.compile(r"^\s*(\(\s*[A-Za-z](?:_\{?\w{1,3}\}?)?(?:\s*,\s*[A-Za-z](?:_\{?\w{1,3}\}?)?)+\s*\)|[A-Za-z](?:_\{?\w{1,3}\}?)?)\s*=\s*(?!=)")


def split_top(text: str, separators: str) -> list[str]:
    """``text`` split at ``separators`` outside every bracket (``\\{`` counts; ``\\\\`` does not)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            if text[i + 1] in "{}":
                depth += 1 if text[i + 1] == "{" else -1
            i += 2
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and c in separators:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def solution_list(span: str) -> str:
    """Solutions written with ``;`` or "and"/"or" in words as one comma list, a label shared by all
    of them dropped (``solution_list`` in the module docstring); ``span`` itself otherwise."""
    if not any(mark in span for mark in ("=", ";", "\\text", "and", "or")):
        return span  # the common case: nothing to look at
    text = re.sub(r"\\(?:left|right)\b", "", span.replace("$", " "))
    text = _SPACES.sub(" ", _WORD_SEPARATOR.sub(";", text)).strip()
    separated = len(split_top(text, ";")) > 1
    items = [p for p in split_top(text, ";,") if p]
    if len(items) < 2:
        return span
    labels = [_ITEM_LABEL.match(item) for item in items]
    if all(labels) and len({re.sub(r"\s", "", m.group(1)) for m in labels if m}) == 1:
        items = [item[m.end() :].strip() for item, m in zip(items, labels) if m]
    elif not separated:
        return span  # commas only and no shared label: as written
    if any("=" in item for item in items):
        return span  # x = 1; y = 2 is one solution of a system, not a list
    return ", ".join(items)


_NUMBER = r"-?\d+(?:\.\d+)?"
_RANGE = re.compile(
    rf"^(?:(?:it\s+is\s+|it\s+lies\s+|lies\s+)?between|from)?\s*({_NUMBER})\s*(?:and|to|&|\\&)\s*({_NUMBER})\s*\.?$", re.I
)


def range_list(span: str) -> str:
    """"between 12 and 13" however boxed, as ``12, 13`` (``range``); ``span`` itself otherwise."""
    low = span.lower()
    if "&" not in low and "and" not in low and "to" not in low:
        return span  # the common case, without a regex
    m = _RANGE.match(_plain(span))
    return span if m is None else f"{m.group(1)}, {m.group(2)}"


_STRUCTURE_LABEL = re.compile(r"^\s*(?=[^=]*[A-Za-z])[^=&\d]{1,30}?(?:\^\{?-1\}?)?\s*=\s*(?=\\begin|\\left|[(\[])")


def structure_value(span: str) -> str:
    """A matrix, tuple or interval without the name written before it (``A^{-1} = ``)."""
    m = _STRUCTURE_LABEL.match(span)
    return span if m is None else span[m.end() :]


__all__ = ["Ratio", "range_list", "ratio_of", "ratios_equal", "solution_list", "split_top", "structure_value"]
