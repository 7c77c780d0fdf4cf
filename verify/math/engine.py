"""math-verify, called the one way this project calls it, behind guards.

``parse_answer`` reads one answer span (already located by ``extract``) with
math-verify's ``parse`` (LaTeX extraction, then plain-expression extraction);
``parse_prose`` lets math-verify find the answer in free text itself;
``same`` is math-verify's ``verify``. Both run with math-verify's own
SIGALRM timeouts disabled (``parsing_timeout=None``, ``timeout_seconds=None``):
those work only in a main thread, fight over SIGALRM with anything else in
the process, and are redundant here, because the verifier pool kills a worker
process that overruns its hard wall-clock limit.

What this module adds is refusing the absurd before sympy ever evaluates it
(``AnswerTooLargeError``): over-deep superscripts (the ANTLR grammar
backtracks exponentially on them), more than ``MAX_NODES`` tree nodes, powers
of a number with a huge exponent, huge factorials and huge integers. It also
reads ``i`` as the imaginary unit (competition convention), and compares
expressions holding a big symbolic power (``(x+1)^{5000}``) structurally only,
since ``simplify`` on them would not come back. A plain integer or
``\\frac{a}{b}`` of integers is read without math-verify's parser
(``plain_number``), into the very values and text math-verify gives. It
does not decide any project policy; see ``policy``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import sympy
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from sympy import Basic, MatrixBase

MAX_NODES = 400  # sympy tree nodes in one answer
MAX_EXPONENT = 10_000  # |e| in b**e for a numeric base other than 0, ±1
MAX_FACTORIAL = 1_000
MAX_SYMBOLIC_POWER = 64  # above this, x**e is compared structurally, never simplified
# Real answers nest superscripts 1-3 deep; x^{x^{x^{...}}} at depth 16 takes
# the grammar seconds.
MAX_SUPERSCRIPT_DEPTH = 5

_CONFIG = (LatexExtractionConfig(), ExprExtractionConfig())

# math-verify logs a warning once when its timeouts are disabled, and at
# debug level for every unparsable candidate: neither is news here.
logging.getLogger("math_verify").setLevel(logging.ERROR)


class AnswerTooLargeError(ValueError):
    """The answer would need absurd work to evaluate (a power tower, a huge
    factorial, too many nodes)."""


@dataclass(frozen=True)
class Parsed:
    """math-verify's reading of one answer: the sympy values (possibly none)
    and the text it normalised them from."""

    values: tuple[Basic | MatrixBase, ...]
    text: str

    @property
    def value(self) -> Basic | MatrixBase | None:
        return self.values[0] if self.values else None


def superscript_depth(text: str) -> int:
    """How deeply superscripts nest, braced (``x^{y^{z}}``) or chained (``x^y^z``)."""
    best = depth = chain = 0
    braces: list[bool] = []  # per open brace: does it open a superscript?
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "^":
            j = i + 1
            while j < n and text[j] == " ":
                j += 1
            if j < n and text[j] == "{":
                braces.append(True)
                depth += 1
                chain = 0
            else:
                chain += 1
            i = j + 1
            best = max(best, depth + chain)
            continue
        chain = 0
        if c == "{":
            braces.append(False)
        elif c == "}" and braces:
            depth -= braces.pop()
        i += 1
    return best


def _magnitude(exp: Basic) -> float | None:
    if exp.free_symbols:
        return None
    try:
        return abs(complex(sympy.N(exp, 15)))
    except (TypeError, ValueError, OverflowError):
        return float("inf")


def guard(expr: Basic | MatrixBase) -> None:
    """Raise ``AnswerTooLargeError`` if evaluating ``expr`` could explode.

    Post-order, so an inner tower is refused before its value is asked for."""
    stack: list[tuple[object, bool]] = [(expr, False)]
    nodes = 0
    while stack:
        node, seen = stack.pop()
        if not isinstance(node, Basic | MatrixBase):
            continue
        if not seen:
            nodes += 1
            if nodes > MAX_NODES:
                raise AnswerTooLargeError(f"more than {MAX_NODES} nodes")
            stack.append((node, True))
            children = node.flat() if isinstance(node, MatrixBase) else node.args
            stack.extend((arg, False) for arg in children)
            continue
        if isinstance(node, sympy.Pow):
            base, exp = node.args
            if base.is_number and base not in (sympy.S.Zero, sympy.S.One, sympy.S.NegativeOne):
                value = _magnitude(exp)
                if value is not None and value > MAX_EXPONENT:
                    raise AnswerTooLargeError("power with a huge exponent")
        elif isinstance(node, sympy.factorial | sympy.factorial2 | sympy.gamma):
            value = _magnitude(node.args[0])
            if value is not None and value > MAX_FACTORIAL:
                raise AnswerTooLargeError("huge factorial")
        elif isinstance(node, sympy.Integer) and abs(node) > 10**1000:
            raise AnswerTooLargeError("integer with more than 1000 digits")


def _finish(found: list) -> Parsed:
    values, text = [], ""
    for item in found:
        if isinstance(item, str):
            text = text or item
            continue
        guard(item)
        if isinstance(item, Basic):
            imaginary = {s: sympy.I for s in item.free_symbols if s.name == "i"}
            item = item.xreplace(imaginary) if imaginary else item
        values.append(item)
    return Parsed(tuple(values), text)


# Plain integers and fractions of integers, as math-verify's LaTeX parser
# reads them (``Integer``, ``Rational``; the text as written): no leading
# zeros (it would keep "007" as the text), at most 300 digits (far below the
# guard's 1000), no spaces, no decimals (it rewrites ``0.5`` to
# ``\frac{1}{2}``).
_PLAIN_INTEGER = re.compile(r"-?(?:0|[1-9]\d{0,299})")
_PLAIN_FRACTION = re.compile(r"(-?)\\frac\{(0|[1-9]\d{0,299})\}\{([1-9]\d{0,299})\}")


def plain_number(body: str) -> Parsed | None:
    """math-verify's reading of a plain integer or ``\\frac{a}{b}`` of
    integers, without running its parser (it costs a millisecond, tens on
    first use in a process); None for anything else. The very values and
    text math-verify gives (``tests/verify/test_math_fast_paths.py`` checks
    it against math-verify on every corpus answer)."""
    if _PLAIN_INTEGER.fullmatch(body):
        return Parsed((sympy.Integer(body),), body)
    m = _PLAIN_FRACTION.fullmatch(body)
    if m is not None:
        value = sympy.Rational(int(m.group(2)), int(m.group(3)))
        return Parsed((-value if m.group(1) else value,), body)
    return None


def parse_answer(span: str) -> Parsed:
    """math-verify's reading of one located answer (``$`` added around it so
    its LaTeX extractor takes the whole span); a plain integer or fraction is
    read without it (``plain_number``)."""
    body = span.replace("$", " ").replace("\n", " ").strip()
    return plain_number(body) or parse_answer_slow(span)


def parse_answer_slow(span: str) -> Parsed:
    """``parse_answer`` always through math-verify (the reference the fast path is tested against)."""
    if superscript_depth(span) > MAX_SUPERSCRIPT_DEPTH:
        raise AnswerTooLargeError(f"superscripts nested deeper than {MAX_SUPERSCRIPT_DEPTH}")
    body = span.replace("$", " ").replace("\n", " ").strip()
    return _finish(parse(f"${body}$", _CONFIG, parsing_timeout=None))


def parse_prose(text: str) -> Parsed:
    """math-verify's own search of free text for the final answer."""
    if superscript_depth(text) > MAX_SUPERSCRIPT_DEPTH:
        raise AnswerTooLargeError(f"superscripts nested deeper than {MAX_SUPERSCRIPT_DEPTH}")
    return _finish(parse(text, _CONFIG, parsing_timeout=None))


def _big_power(expr: Basic | MatrixBase) -> bool:
    if not isinstance(expr, Basic):
        return False
    return any(
        p.exp.is_Number and abs(p.exp) > MAX_SYMBOLIC_POWER and p.base.free_symbols for p in expr.atoms(sympy.Pow)
    )


def _constants_equal(gold: Basic, pred: Basic) -> bool | None:
    """Two exact, symbol-free numbers: equal as rationals, else to 1e-40
    relative at 60 digits (so ``\\pi + 10^{-14}`` is not ``\\pi``); None when
    that does not apply. math-verify would end in ``simplify``, which takes
    minutes on a continued fraction 20 deep."""
    if not (isinstance(gold, sympy.Expr) and isinstance(pred, sympy.Expr)):
        return None
    for e in (gold, pred):  # symbols, floats and percent (UnevaluatedExpr) are math-verify's
        if e.free_symbols or e.atoms(sympy.Float) or e.has(sympy.UnevaluatedExpr):
            return None
    try:
        g, p = gold.doit(), pred.doit()
        if isinstance(g, sympy.Rational) and isinstance(p, sympy.Rational):
            return g == p
        diff = abs(sympy.N(p - g, 60))
        scale = max(sympy.Float(1), abs(sympy.N(g, 60)))
    except (TypeError, ValueError, OverflowError, ZeroDivisionError):
        return None
    if not (diff.is_number and diff.is_finite and scale.is_finite):
        return None
    return bool(diff <= scale * sympy.Float("1e-40"))


def _doit(expr: Basic | MatrixBase) -> Basic | MatrixBase:
    try:
        return expr.doit()
    except Exception:  # sympy raises many kinds; the unevaluated tree still compares
        return expr


def same(gold: Parsed, pred: Parsed) -> bool:
    """math-verify's ``verify`` over both readings (string forms included)."""
    if not gold.values or not pred.values:
        return bool(gold.text) and gold.text.strip() == pred.text.strip()
    if any(_big_power(v) for v in gold.values + pred.values):
        return any(_doit(g) == _doit(p) for g in gold.values for p in pred.values)
    if gold.text and gold.text == pred.text or any(g == p for g in gold.values for p in pred.values):
        return True  # the same tree: nothing to evaluate
    if len(gold.values) == 1 and len(pred.values) == 1:
        exact = _constants_equal(gold.value, pred.value)
        if exact is not None:
            return exact
    return verify(list(gold.values), list(pred.values), timeout_seconds=None)


__all__ = [
    "AnswerTooLargeError",
    "Parsed",
    "guard",
    "parse_answer",
    "parse_answer_slow",
    "parse_prose",
    "plain_number",
    "same",
    "superscript_depth",
]
