"""Canonical text form of an extracted answer, and its split into parts.

``clean`` removes what never changes the value: math delimiters, spacing
macros, ``\\left``/``\\right``, ``\\dfrac``/``\\tfrac``, dollar signs, degree
marks, thousands separators, trailing units and ``\\text{...}`` labels, and
repairs brace-less ``\\frac12`` / ``\\sqrt2``. ``split_top`` splits at commas
outside brackets. Nothing here decides equivalence or calls sympy.
"""

from __future__ import annotations

import re

# Words dropped when they trail a value ("10 cm", "5 dollars"). A whitelist,
# not "any word": "3 pi" must stay 3π, never become 3.
_UNITS = (
    "cm|mm|km|m|meters?|metres?|centimeters?|millimeters?|kilometers?|inch|inches|in|feet|foot|ft|"
    "yards?|yd|miles?|mi|mph|seconds?|sec|s|minutes?|min|hours?|hrs?|h|days?|weeks?|months?|years?|"
    "grams?|g|kg|kilograms?|pounds?|lbs?|lb|ounces?|oz|liters?|litres?|l|ml|gallons?|cups?|"
    "dollars?|cents?|units?|square|sq|cubic|degrees?|deg|percent|points?|people|students|"
    "apples|cookies|pages|items|times|ways|marbles|hours|boxes|books"
)
_TRAILING_UNIT = re.compile(r"^(.*?[\d}.])\s*(?:(?:" + _UNITS + r")\b\.?\s*)+(?:\^\{?[23]\}?)?$", re.IGNORECASE)
_TEXT_MACRO = re.compile(r"\\(?:text|textbf|textit|mbox|mathrm|mathbf|mathit|operatorname|textnormal|rm)\s*\{")
_TRAILING_TEXT = re.compile(r"^(.*?\S)\s*\\text\{[^{}]*\}(?:\s*\^\{?[23]\}?)?$")
_DROP = (
    "\\displaystyle", "\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\quad", "\\qquad",
    "\\big", "\\Big", "\\bigg", "\\Bigg", "\\limits",
)
_DEGREE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\circ|\\degree|\^\{\\text\{o\}\}")
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")


def unwrap_macro(text: str, macro: re.Pattern[str]) -> str:
    """Replace ``\\text{abc}`` (and friends) by ``abc``, braces balanced."""
    out = []
    i = 0
    while True:
        m = macro.search(text, i)
        if m is None:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            if text[j] == "\\":
                j += 2
                continue
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        out.append(text[m.end() : j - 1] if depth == 0 else text[m.end() :])
        i = j


def _brace_group(text: str, i: int) -> tuple[str, int]:
    """The argument starting at ``text[i]``: ``{...}`` or one character."""
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text):
        return "", i
    if text[i] != "{":
        if text[i] == "\\":  # \frac\pi2
            m = re.match(r"\\[a-zA-Z]+", text[i:])
            if m:
                return "{" + m.group(0) + "}", i + m.end()
        return "{" + text[i] + "}", i + 1
    depth, j = 0, i
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
        if depth == 0:
            break
    return text[i:j], j


def fix_braces(text: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\sqrt2`` -> ``\\sqrt{2}``."""
    for macro, n_args in (("\\frac", 2), ("\\sqrt", 1)):
        if macro not in text:
            continue
        out, i = [], 0
        while True:
            k = text.find(macro, i)
            if k < 0:
                out.append(text[i:])
                break
            out.append(text[i : k + len(macro)])
            j = k + len(macro)
            if macro == "\\sqrt" and j < len(text) and text[j] == "[":
                close = text.find("]", j)
                if close < 0:
                    out.append(text[j:])
                    break
                out.append(text[j : close + 1])
                j = close + 1
            for _ in range(n_args):
                group, j = _brace_group(text, j)
                out.append(group)
            i = j
        text = "".join(out)
    return text


def strip_delimiters(text: str) -> str:
    text = text.strip()
    for left, right in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if text.startswith(left) and text.endswith(right) and len(text) >= len(left) + len(right):
            text = text[len(left) : len(text) - len(right)].strip()
    return text


def clean(text: str) -> str:
    """Canonical text of one answer (see the module docstring)."""
    text = strip_delimiters(text.replace("\\$", "")).replace("$", "")
    text = text.replace("**", "").replace("\n", " ")
    text = re.sub(r"(?<=\d),\\!\s*(?=\d{3}(?!\d))", "", text)  # 10,\!080
    several_angles = len(_DEGREE.findall(text)) > 1
    for word in _DROP:
        text = text.replace(word, "" if word[1:2].isalpha() or word == "\\!" else " ")
    text = re.sub(r"\\[dt]frac", r"\\frac", text)
    text = text.replace("\\$", "").replace("\\dots", "\\ldots").replace("\\cdots", "\\ldots")
    text = re.sub(r"\\(?:le|leqslant)(?![a-zA-Z])", r"\\leq", text)
    text = re.sub(r"\\(?:ge|geqslant)(?![a-zA-Z])", r"\\geq", text)
    text = text.replace("{,}", "").replace("\\infty", "\\infty ").replace("∞", "\\infty ")
    text = _DEGREE.sub("", text)
    text = re.sub(r"\\mbox\s*\{", r"\\text{", text)
    text = re.sub(r"\\(?:textbf|textit|textnormal|mathrm|mathbf|mathit)\s*\{", r"\\text{", text)
    text = fix_braces(text)
    text = re.sub(r"\s+", " ", text).strip().rstrip(".").strip()
    # "10 \text{ cm}^2": a trailing label after a value is a unit.
    for _ in range(3):
        m = _TRAILING_TEXT.match(text)
        if m is None or not re.search(r"[\d}]$", m.group(1)):
            break
        text = m.group(1)
    text = unwrap_macro(text, _TEXT_MACRO).strip()
    m = _TRAILING_UNIT.match(text)
    if m is not None:
        text = m.group(1).strip()
    text = re.sub(r"\s+", " ", text).strip()
    if _THOUSANDS.match(text) and not several_angles:  # "45, 135" (with a space) stays a list
        text = text.replace(",", "")
    return text


def squash(text: str) -> str:
    """The form used for plain string comparison: no spaces, no braces
    around a single character (``x^{2}`` = ``x^2``)."""
    text = text.replace(" ", "")
    return re.sub(r"([_^])\{(\w)\}", r"\1\2", text)


_OPEN = "([{"
_CLOSE = ")]}"


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside (), [], {} (escaped ``\\{`` counts too)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
            depth += 1 if text[i + 1] == "{" else -1
            i += 2
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i].strip())
            start = i + len(sep)
            i = start
            continue
        i += 1
    parts.append(text[start:].strip())
    return parts


def matching_close(text: str, open_at: int) -> int:
    """Index of the bracket closing ``text[open_at]`` (any bracket kind)."""
    depth = 0
    for i in range(open_at, len(text)):
        c = text[i]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return i
    return -1


def nesting_depth(text: str) -> int:
    depth = best = 0
    for c in text:
        if c in _OPEN:
            depth += 1
            best = max(best, depth)
        elif c in _CLOSE:
            depth -= 1
    return best


__all__ = ["clean", "fix_braces", "matching_close", "nesting_depth", "split_top", "squash", "unwrap_macro"]
