"""The project's explicit answer policies, a thin layer over math-verify.

Each policy has a name; the scorer reports the one that decided a case.

- ``localise`` (text, before parsing): spaced thousands (``1 000``,
  ``1\\,000``, ``1{,}000``) lose their separators; ``pct``, ``percent``,
  ``percentage`` become ``\\%``; ``°`` becomes ``^\\circ``; currency signs go;
  a ``\\text{...}`` label after a value is a unit and goes; a range
  ("between 12 and 13", ``range``) and a list of solutions (``;``,
  ``\\quad\\text{and}\\quad``, a shared ``(x, y) =``: ``solution_list``)
  are rewritten as one comma list (both in ``forms``).
- ``localise_prose``: in free text only ``1 200,50`` (spaced thousands, then
  a decimal comma) is rewritten; math-verify reads other localised numbers.
  ``list_marker``: the "4." that opens an item of a numbered list is no
  answer, so a response cut off after "4. Since we" does not answer 4.
  ``unevaluated``: plain-text arithmetic that math-verify finds in prose
  ("5 - 61 is a mix of ...") restates the question; the search falls back to
  the last result after "=" in the text, then to the last number. Math
  groups joined by ";" or by "and"/"or" in French or Chinese are joined by
  "and", which math-verify reads as a list, as it does in English.
- ``decimal_comma``: a response that is one number (or ``x =`` one number)
  with a single comma reads it as a decimal comma (``1000,99``, ``0,111``,
  ``2,5``) unless the comma groups thousands (``1,000``), and only when the
  gold is one number, so ``(6,1)`` and lists stay lists. A gold written so
  (``1,22``) is read the same way when the response is a decimal (``1.22``).
- ``identical``: the answer written as the gold is (spaces aside) is right
  without parsing.
- ``choice``: a gold that is a letter A-E (``B``, ``(B)``, ``\\text{(B)}``)
  is matched by the response's leading letter only.
- ``word``: a word answer (``\\text{east}``) compares as text, case and
  spacing aside; ``base_n``: ``40_9`` compares as text (it is not 40).
- ``number``: two plain numbers compare exactly (``numbers``), with the
  decimal tolerance policy for a decimal against an exact value
  (``tolerance``: at least 4 significant digits, within one unit of the last).
- ``ratio``: ratios of plain numbers, with or without a label
  (``V_1:V_2 = 11:21`` against ``11:21``), compare term by term up to a
  common factor (``forms``). A labelled ratio is never a time; two bare
  ``H:MM`` forms are (``time``).
- ``time``: ``H:MM`` times of day compare as times (math-verify reads
  ``12:00`` and ``1:00`` as ratios over 0, and equal).
- ``result``: arithmetic on plain numbers written out with its result
  (``3 \\times 12 = 36``, often the last math of prose in any language)
  answers the result; ``2x + 3 = 11`` stays an equation (``equation``).
- ``decimal_in_structure``: a matrix, tuple or interval of plain numbers
  with decimals against an exact gold of the same shape, entry by entry by
  the ``tolerance`` rule (``(0.3333, 0.5)`` for ``(\\frac13, \\frac12)``);
  exact entries (``\\frac13``, ``0.\\overline{3}``) may stand beside the
  decimals, a name may stand before the matrix (``A^{-1} =``), and
  ``\\begin{array}`` is a matrix too. A row never matches a column.
- ``ordered``: when the gold is a tuple or interval, a bare list in the
  response is read as a tuple in its written order, never as a set.
- everything else is math-verify's ``verify`` (``math_verify``): units,
  percent against plain numbers, degrees, sets, intervals, matrices,
  equations and symbolic equality.
"""

from __future__ import annotations

import re
from fractions import Fraction

import sympy

from rlvr.verify.math import forms
from rlvr.verify.math.numbers import Number, decimal_matches_exact, numbers_equal, parse_number

_SPACED_THOUSANDS = re.compile(r"(?<![\d.,])(\d{1,3})((?:(?:\\,|\\;|\\:|\\ |~|\{,\}|,\\!|\u00a0|\u202f| )\d{3})+)(?![\d])")
_SEPARATOR = re.compile(r"\\,|\\;|\\:|\\ |~|\{,\}|,\\!|\u00a0|\u202f| ")
_PERCENT_WORD = re.compile(r"(?<=[\d}])\s*(?:\\text\{\s*)?(?:pct|per\s?cent(?:age)?|percentage)\b\.?\}?", re.I)
_CURRENCY = re.compile(r"\\\$|\$|€|£|\\euro\b|\b(?:USD|EUR|GBP)\b")
_TRAILING_LABEL = re.compile(r"^(.*?[\d}])\s*\\(?:text|mbox|mathrm|textbf)\s*\{[^{}]*\}(?:\s*\^\s*\{?[23]\}?)?$")
_DECIMAL_COMMA = re.compile(r"^(?:[a-zA-Z]\s*=\s*)?(-?\d+),(\d+)$")
_LIST_MARKER = re.compile(r"^([ \t]*)\d{1,2}[.)][ \t]+(?=[^\W\d_])", re.M)
_PLAIN_ARITHMETIC = re.compile(r"[\d\s.,+\-*/×()]+")
_OPERATION = re.compile(r"\d\s*[-+*/×]\s*\(?\d")
_RESULT = re.compile(r"\d\s*=\s*(-?\d+(?:\.\d+)?)(?![\d.,]?\d)")
_SPACED_DECIMAL = re.compile(r"(?<![\d.,])(\d{1,3}(?:[ \u00a0\u202f]\d{3})+),(\d{1,2})(?!\d)")
# Between two math groups: ";" or "and"/"or" in French or Chinese (math-verify joins ",", "and", "or").
_MATH_JOIN = re.compile(r"(\$|\\\))[ \t]*(?:;|；|、|\bet\b|\bou\b|和|或|以及)[ \t]*(\$|\\\()")
_CHOICE = re.compile(r"^(?:\\text(?:bf)?\{)?\s*\(?([A-E])\)?\s*\}?$")
# The letter must stand alone: "E*2", "E = mc^2" or "B_1" are expressions, not the choice E or B.
_CHOICE_PRED = re.compile(r"^(?:\\text(?:bf)?\{)?\s*\(?([A-Ea-e])\)?(?![A-Za-z0-9])(?!\s*[*/^+=×·_\\-])")
_TIME = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?\s*((?:a|p)\.?\s*m\.?)?$", re.I)
_WORD = re.compile(r"^[A-Za-z][A-Za-z '\-]*$")
_BASE_N = re.compile(r"^\d+_\{?\d+\}?$")
_TEXT_MACRO = re.compile(r"\\(?:text|textbf|textit|mbox|mathrm)\s*\{([^{}]*)\}")


def localise(span: str) -> str:
    """Text clean-ups that keep the value (see the module docstring)."""
    text = _CURRENCY.sub("", span).replace("°", "^\\circ").strip()
    text = _SPACED_THOUSANDS.sub(lambda m: m.group(1) + _SEPARATOR.sub("", m.group(2)), text)
    text = _PERCENT_WORD.sub("\\%", text)
    for _ in range(2):
        m = _TRAILING_LABEL.match(text)
        if m is None:
            break
        text = m.group(1).strip()
    return forms.solution_list(forms.range_list(text.strip()))


def localise_prose(text: str) -> str:
    """Free text before math-verify searches it: ``1 200,50`` (spaced
    thousands and a decimal comma) becomes ``1200.50``, and the numbers of a
    numbered list ("4. Since you ...") go: they are list markers, not answers
    (``list_marker``). Math groups joined by ";" or by "and"/"or" in French or
    Chinese ("$(1, 2)$; $(3, 4)$", "$(1, 2)$ et $(3, 4)$") are joined by "and",
    which math-verify reads as one list, as it does in English (``solution_list``)."""
    text = _LIST_MARKER.sub(r"\1", text)
    text = _MATH_JOIN.sub(r"\1 and \2", text)
    return _SPACED_DECIMAL.sub(lambda m: re.sub(r"\D", "", m.group(1)) + "." + m.group(2), text)


def unevaluated(found: str, prose: str) -> bool:
    """Arithmetic on plain numbers that math-verify found in prose with no
    math in it ("5 - 61 is a mix of ..."): a restated question, not an
    answer (``unevaluated``). Prose with ``$``/``\\(``/``\\[`` math is not
    affected (``Answer \\( (9+1) \\)``)."""
    if any(mark in prose for mark in ("$", "\\(", "\\[")):
        return False
    return _plain_arithmetic(found)


def _plain_arithmetic(text: str) -> bool:
    """Digits, operators and parentheses only, with at least one operation."""
    return bool(_PLAIN_ARITHMETIC.fullmatch(text.strip())) and _OPERATION.search(text) is not None


def undone(span: str) -> bool:
    """A located answer that is arithmetic on plain numbers left undone
    (``\\boxed{6 + 7}`` for "What is 6 + 7?"): the question restated, which
    math-verify evaluates and would call equal to the gold. A plain number,
    a fraction (``1/2``, ``\\frac{1}{2}``) or anything with a symbol in it
    is not undone arithmetic."""
    if number_of(span) is not None:
        return False
    return _plain_arithmetic(re.sub(r"\\(?:times|cdot|div)(?![A-Za-z])", "*", span))


# ":" divides in French ("120 : 40 = 3"); a ratio with names on the left is ``forms.ratio_of``'s.
_ARITH_MACRO = re.compile(r"\\(?:times|cdot|div)(?![A-Za-z])|[·÷−:]|\\(?:left|right)\b|\\[,;!]")
_NUMBER_FRACTION = re.compile(r"\\[dt]?frac\s*\{\s*(\d+(?:\.\d+)?)\s*\}\s*\{\s*(\d+(?:\.\d+)?)\s*\}")
_ARITH_SYMBOL = {"\\times": "*", "\\cdot": "*", "\\div": "/", "·": "*", "÷": "/", ":": "/", "−": "-"}


def stated_result(span: str) -> str | None:
    """The number after the last "=" when everything before it is arithmetic on plain numbers
    (``3 \\times 12 = 36``, ``\\frac{1}{2} \\times 6 \\times 4 = 12``, ``120 : 40 = 3``): the result it states
    (``result``). None otherwise: ``2x + 3 = 11`` is an equation, not a result."""
    if "=" not in span:
        return None
    *work, result = span.split("=")
    result = result.strip().rstrip(".").strip()
    if number_of(result) is None:
        return None
    for k, side in enumerate(work):
        text = _NUMBER_FRACTION.sub(r"\1/\2", side)
        text = _ARITH_MACRO.sub(lambda m: _ARITH_SYMBOL.get(m.group(0), ""), text)
        if not (_plain_arithmetic(text) or (k and number_of(side) is not None)):  # 3 + 4 = 7 = 7
            return None
    return result


def last_result(prose: str) -> str | None:
    """The number after the last "=" of plain-text arithmetic, if any."""
    last = None
    for last in _RESULT.finditer(prose):
        pass
    return None if last is None else last.group(1)


def decimal_comma(span: str) -> str | None:
    """``span`` with its comma read as a decimal point, or None when it is
    not one number or the comma groups thousands."""
    m = _DECIMAL_COMMA.match(span.strip())
    if m is None:
        return None
    whole, frac = m.group(1).lstrip("-"), m.group(2)
    if len(frac) == 3 and 1 <= len(whole) <= 3 and not whole.startswith("0"):
        return None  # 1,000 groups thousands
    return f"{m.group(1)}.{frac}"


def plain_text(span: str) -> str:
    text = _TEXT_MACRO.sub(r"\1", span).replace("$", "").strip().rstrip(".")
    return re.sub(r"\s+", " ", text).strip()


def choice_of(gold: str) -> str | None:
    m = _CHOICE.match(plain_text(gold)) or _CHOICE.match(gold.strip())
    return m.group(1) if m is not None else None


def pred_choice(pred: str) -> str | None:
    m = _CHOICE_PRED.match(pred.strip()) or _CHOICE_PRED.match(plain_text(pred))
    return m.group(1).upper() if m is not None else None


def time_of(text: str) -> str | None:
    """A time of day written ``H:MM`` (``12:00``, ``1:05 p.m.``), normalised; None when it is not one.
    math-verify reads ``12:00`` as the ratio 12/0 and ``1:00`` as 1/0, and calls them equal."""
    m = _TIME.match(plain_text(text).replace("\\!", "").strip())
    if m is None:
        return None
    hour, minute, second, half = int(m.group(1)), m.group(2), m.group(3) or "00", (m.group(4) or "").lower()
    return f"{hour}:{minute}:{second}{re.sub(r'[^ap]', '', half)}"


_MATRIX = re.compile(r"^\\begin\{[pbvBV]?matrix\}(.*)\\end\{[pbvBV]?matrix\}$", re.S)
# \left(\begin{array}{cc} ... \end{array}\right), once \left and \right are gone
_ARRAY = re.compile(r"^[(\[]?\s*\\begin\{array\}\{[^{}]*\}(.*)\\end\{array\}\s*[)\]]?$", re.S)


def elements(span: str) -> list[list[str]] | None:
    """The written entries of a matrix (row by row), tuple or interval (one row) (``(0.33, 0.5)``,
    ``\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}``, ``\\left(\\begin{array}{c} ...``, ``A^{-1} = ...``); None
    when ``span`` is none of them. Entries are not checked: a nested one is no plain number."""
    text = re.sub(r"\\(?:left|right)\b|\\[bB]igg?[lr]?\b", "", forms.structure_value(span)).strip()
    text = re.sub(r"\\[dt]frac\b", r"\\frac", text)
    m = _MATRIX.match(text) or _ARRAY.match(text)
    if m is not None:
        rows = [row.split("&") for row in re.split(r"\\\\", m.group(1))]
    elif brackets(text):
        rows = [forms.split_top(text[1:-1], ",")]  # "\frac{1}{3}, 2": commas outside braces
    else:
        return None
    rows = [[p.strip() for p in row] for row in rows if any(p.strip() for p in row)]
    if not rows or any(not p for row in rows for p in row):
        return None
    return rows


def elementwise_tolerance(pred_span: str, gold_rows: list[list[object]]) -> bool | None:
    """Decimals against exact values entry by entry (``decimal_in_structure``): every entry of the
    response a plain number, at least one written with a decimal point (``0.3333``, ``0.\\overline{3}``),
    the same shape as the gold, each entry matching its gold entry by ``tolerance`` (a decimal) or
    exactly (an integer, fraction or repeating decimal). None when the rule does not apply."""
    rows = elements(pred_span)
    if rows is None or [len(r) for r in rows] != [len(r) for r in gold_rows]:
        return None
    parts = [p for row in rows for p in row]
    numbers = [number_of(p) for p in parts]
    if any(n is None for n in numbers) or not any("." in p for p in parts):
        return None
    for n, exact in zip(numbers, (g for row in gold_rows for g in row)):
        assert n is not None
        if isinstance(exact, sympy.Rational) and n.value == Fraction(int(exact.p), int(exact.q)):
            continue  # 0.5 for 1/2: equal, whatever its digits
        if n.decimal:
            ok = tolerance(n, exact)
        else:
            value = _exact_value(exact)
            ok = None if value is None else (value.imag == 0 and numbers_equal(n, parse_number(_plain(value.real))))
        if not ok:
            return None if ok is None else False
    return True


def _plain(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def _text_form(text: str) -> str:
    return re.sub(r"^the\s+", "", plain_text(text).lower()).replace(" ", "").replace("{", "").replace("}", "")


def is_word(text: str) -> bool:
    plain = plain_text(text)
    return bool(_WORD.match(plain)) and re.search(r"[A-Za-z]{3,}", plain) is not None


def words_equal(pred: str, gold: str) -> bool:
    return _text_form(pred) == _text_form(gold)


def is_base_n(text: str) -> bool:
    return bool(_BASE_N.match(text.replace(" ", "")))


def base_n_equal(pred: str, gold: str) -> bool:
    return pred.replace(" ", "").replace("{", "").replace("}", "") == gold.replace(" ", "").replace("{", "").replace("}", "")


def brackets(span: str) -> str:
    """The outer brackets of a tuple or interval (``"()"``, ``"[)"``), or ""."""
    text = re.sub(r"\\(?:left|right)\b|\\[bB]igg?[lr]?\b", "", span).strip()
    if len(text) >= 2 and text[0] in "([" and text[-1] in ")]" and "," in text:
        return text[0] + text[-1]
    return ""


def number_of(text: str) -> Number | None:
    """A plain number written as ``text`` (math-verify's normalised text or
    a located span); thousands commas allowed."""
    text = plain_text(text)  # \text{1.25} is the number 1.25
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", text):
        text = text.replace(",", "")
    return parse_number(text)


def _exact_value(value: object) -> complex | None:
    """The value of an exact, symbol-free sympy number (not a Float)."""
    if not isinstance(value, sympy.Expr) or value.free_symbols or value.atoms(sympy.Float):
        return None
    try:
        result = complex(sympy.N(value, 30))
    except (TypeError, ValueError, OverflowError, ZeroDivisionError):
        return None
    return result if result == result and abs(result) != float("inf") else None


def tolerance(decimal: Number, exact: object) -> bool | None:
    """The decimal-vs-exact rule, or None when ``exact`` is not an exact number."""
    value = _exact_value(exact)
    if value is None:
        return None
    return value.imag == 0 and decimal_matches_exact(decimal, value.real)


def numbers_decide(pred: Number | None, gold: Number | None) -> bool | None:
    if pred is None or gold is None:
        return None
    return numbers_equal(pred, gold)


__all__ = [
    "base_n_equal",
    "brackets",
    "choice_of",
    "decimal_comma",
    "elements",
    "elementwise_tolerance",
    "is_base_n",
    "is_word",
    "last_result",
    "localise",
    "localise_prose",
    "number_of",
    "numbers_decide",
    "pred_choice",
    "stated_result",
    "time_of",
    "tolerance",
    "unevaluated",
    "words_equal",
]
