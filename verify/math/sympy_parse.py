"""LaTeX -> sympy, guarded against absurd inputs.

The parsing itself is latex2sympy2_extended's ANTLR grammar: it already knows
``\\frac``, ``\\sqrt[n]``, implicit products, trig/log functions, ``\\pi``,
``\\infty``, factorials, mixed numbers and percent, which a hand-written parser
would take hundreds of lines to match. It builds ``Pow``/``Mul``/``Add`` with
``evaluate=False``, so nothing is computed until we say so; ``guard`` then
walks the unevaluated tree and refuses towers such as ``9^{9^{9^9}}`` and huge
factorials before any arithmetic happens.

We call ``latex2sympy`` directly, never math-verify's ``parse``/``verify``
wrappers, and so never arm their SIGALRM timers: those only work in a main
thread, would fight over SIGALRM with anything else in the process, and are
redundant here, because ``score_math`` runs inside a worker process that the
pool kills on a hard wall-clock timeout. Our own job is to keep the common
case fast and refuse the absurd (``AnswerTooLargeError``).
"""

from __future__ import annotations

import sympy
from latex2sympy2_extended.latex2sympy2 import ConversionConfig, latex2sympy

MAX_NODES = 400  # sympy tree nodes in one answer
MAX_EXPONENT = 10_000  # |e| in b**e for a numeric base other than 0, ±1
MAX_FACTORIAL = 1_000
# The ANTLR grammar backtracks exponentially on nested superscripts
# (x^{x^{x^{...}}} takes seconds at depth 16); real answers nest 1-3 deep.
MAX_SUPERSCRIPT_DEPTH = 5

_CONVERSION = ConversionConfig(interpret_as_mixed_fractions=True, lowercase_symbols=False)
_I = sympy.Symbol("i")


class AnswerTooLargeError(ValueError):
    """The answer would need absurd work to evaluate (a power tower, a huge
    factorial, too many nodes)."""


class AnswerUnparsableError(ValueError):
    """latex2sympy could not read the answer."""


def _exponent_value(exp: sympy.Basic) -> float | None:
    if exp.free_symbols:
        return None
    try:
        value = complex(sympy.N(exp, 15))
    except (TypeError, ValueError, OverflowError):
        return float("inf")
    return abs(value)


def guard(expr: sympy.Basic) -> None:
    """Raise ``AnswerTooLargeError`` if evaluating ``expr`` could explode.

    Post-order, so an inner tower is refused before its value is ever asked
    for."""
    stack: list[tuple[sympy.Basic, bool]] = [(expr, False)]
    nodes = 0
    while stack:
        node, seen = stack.pop()
        if not isinstance(node, sympy.Basic):
            continue
        if not seen:
            nodes += 1
            if nodes > MAX_NODES:
                raise AnswerTooLargeError(f"more than {MAX_NODES} nodes")
            stack.append((node, True))
            stack.extend((arg, False) for arg in node.args)
            continue
        if isinstance(node, sympy.Pow):
            base, exp = node.args
            if base.is_number and base not in (sympy.S.Zero, sympy.S.One, sympy.S.NegativeOne):
                value = _exponent_value(exp)
                if value is not None and value > MAX_EXPONENT:
                    raise AnswerTooLargeError("power with a huge exponent")
        elif isinstance(node, (sympy.factorial, sympy.factorial2, sympy.gamma)):
            value = _exponent_value(node.args[0])
            if value is not None and value > MAX_FACTORIAL:
                raise AnswerTooLargeError("huge factorial")
        elif isinstance(node, sympy.Integer) and abs(node) > 10**1000:
            raise AnswerTooLargeError("integer with more than 1000 digits")


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
                i = j + 1
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


def _exact_floats(expr: sympy.Basic) -> sympy.Basic:
    """Floats as the decimals they were written as: 0.1 -> 1/10 exactly."""
    floats = expr.atoms(sympy.Float)
    if not floats:
        return expr
    return expr.xreplace({f: sympy.Rational(str(f)) for f in floats})


def to_sympy(latex: str) -> sympy.Basic:
    """Parse one scalar/equation answer. Raises ``AnswerUnparsableError`` or
    ``AnswerTooLargeError``; never evaluates before ``guard`` passed."""
    if superscript_depth(latex) > MAX_SUPERSCRIPT_DEPTH:
        raise AnswerTooLargeError(f"superscripts nested deeper than {MAX_SUPERSCRIPT_DEPTH}")
    try:
        expr = latex2sympy(latex, normalization_config=None, conversion_config=_CONVERSION)
    except Exception as exc:  # the ANTLR layer raises bare Exception
        raise AnswerUnparsableError(f"{type(exc).__name__}: {str(exc)[:80]}") from None
    if isinstance(expr, (list, tuple)):
        raise AnswerUnparsableError("several expressions")
    if not isinstance(expr, sympy.Basic):
        raise AnswerUnparsableError(f"not an expression: {type(expr).__name__}")
    guard(expr)
    expr = _exact_floats(expr)
    if _I in expr.free_symbols:  # in competition answers i is the imaginary unit
        expr = expr.xreplace({_I: sympy.I})
    return expr


__all__ = ["AnswerTooLargeError", "AnswerUnparsableError", "guard", "to_sympy"]
