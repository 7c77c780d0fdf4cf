"""Plain numbers read exactly, and the tolerance policy between a decimal and
an exact value.

Integers, decimals (``.5``, ``3.``), scientific notation (``3.2e5``,
``3.2\\times 10^{5}``), fractions (``\\frac{3}{4}``, ``3/4``, ``-\\frac{3}{4}``),
mixed numbers (``2\\frac{1}{2}`` = 5/2) and repeating decimals
(``0.\\overline{3}`` = 1/3, ``1.2\\overline{45}``: exact values; math-verify reads
``0.\\overline{3}`` as 0) become exact ``Fraction``s without sympy, which keeps
GSM8K-style answers in microseconds.

Tolerance policy (false positives cost more than false negatives):
- two exact literals (integers, fractions) must be equal exactly;
- two decimals must be equal exactly as written (``3.50`` = ``3.5``, but
  ``3.14`` != ``3.1416``), because a gold decimal already carries the
  precision the problem asked for;
- a decimal against an exact value (``0.3333`` vs ``\\frac13``,
  ``37.699`` vs ``12\\pi``) matches when the decimal shows at least
  ``MIN_SIGNIFICANT`` = 4 significant digits and lies within one unit of its
  last digit (rounded or truncated). ``0.333`` vs ``1/3`` is wrong; an integer
  is never matched by a non-equal decimal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

MIN_SIGNIFICANT = 4

_DECIMAL = re.compile(r"^([+-]?)(\d*)(?:\.(\d*))?$")
_SCI = re.compile(r"^(.+?)\s*(?:e|E|\\times\s*10\s*\^|\\cdot\s*10\s*\^|\*\s*10\s*\^)\s*\{?\s*([+-]?\d{1,4})\s*\}?$")
_FRAC = re.compile(r"^([+-]?)\\frac\{\s*([+-]?\d+)\s*\}\{\s*([+-]?\d+)\s*\}$")
_SLASH = re.compile(r"^([+-]?)(\d+)\s*/\s*(\d+)$")
_REPEATING = re.compile(r"^([+-]?)(\d*)\.(\d*)\\overline\s*(?:\{(\d{1,50})\}|(\d))$")
_MIXED = re.compile(r"^([+-]?)(\d+)\s*\\frac\{\s*(\d+)\s*\}\{\s*(\d+)\s*\}$")


@dataclass(frozen=True)
class Number:
    value: Fraction
    decimal: bool = False  # written with a decimal point (and no exponent)
    decimals: int = 0  # digits after the point
    significant: int = 0  # significant digits shown


def _parse_decimal(text: str) -> Number | None:
    m = _DECIMAL.match(text)
    if m is None or not (m.group(2) or m.group(3)):
        return None
    sign, whole, frac = m.group(1), m.group(2), m.group(3)
    if len(whole) + len(frac or "") > 400:
        return None
    value = Fraction(f"{whole or '0'}.{frac or '0'}")
    if sign == "-":
        value = -value
    if frac is None:
        return Number(value)
    digits = (whole + frac).lstrip("0")
    return Number(value, decimal=True, decimals=len(frac), significant=len(digits))


def parse_number(text: str) -> Number | None:
    """An exact number, or None when ``text`` is not a plain number."""
    text = text.strip()
    if text.startswith("+"):
        text = text[1:]
    if len(text) > 500:
        return None
    number = _parse_decimal(text)
    if number is not None:
        return number
    m = _REPEATING.match(text)
    if m is not None:
        sign, whole, fixed, repeat = m.group(1), m.group(2) or "0", m.group(3), m.group(4) or m.group(5)
        value = Fraction(int(whole + fixed + repeat) - int(whole + fixed), 10 ** len(fixed) * (10 ** len(repeat) - 1))
        return Number(-value if sign == "-" else value)
    m = _SCI.match(text)  # after _REPEATING: "\\overline{3}" ends like an exponent "e{3}"
    if m is not None:
        mantissa = _parse_decimal(m.group(1).strip())
        if mantissa is not None:
            return Number(mantissa.value * Fraction(10) ** int(m.group(2)))
        return None
    for pattern in (_FRAC, _SLASH):
        m = pattern.match(text)
        if m is not None:
            den = int(m.group(3))
            if den == 0:
                return None
            value = Fraction(int(m.group(2)), den)
            return Number(-value if m.group(1) == "-" else value)
    m = _MIXED.match(text)
    if m is not None:
        num, den = int(m.group(3)), int(m.group(4))
        if den == 0 or num >= den:
            return None
        value = int(m.group(2)) + Fraction(num, den)
        return Number(-value if m.group(1) == "-" else value)
    return None


def decimal_matches_exact(decimal: Number, exact: float | Fraction) -> bool:
    """The tolerance rule above, for a decimal against an exact value."""
    if decimal.significant < MIN_SIGNIFICANT:
        return False
    return abs(float(decimal.value) - float(exact)) < 10.0 ** (-decimal.decimals) * (1 - 1e-9)


def numbers_equal(a: Number, b: Number) -> bool:
    if a.value == b.value:
        return True
    if a.decimal and not b.decimal:
        return decimal_matches_exact(a, b.value)
    if b.decimal and not a.decimal:
        return decimal_matches_exact(b, a.value)
    return False


__all__ = ["MIN_SIGNIFICANT", "Number", "decimal_matches_exact", "numbers_equal", "parse_number"]
