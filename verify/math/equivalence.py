"""Is an extracted answer equivalent to the gold answer?

Order of checks, cheapest and safest first:
1. identical after ``clean`` (spacing, ``\\dfrac``, units, separators ...);
2. multiple-choice letters, word answers (``\\text{east}``) and base-n
   numerals (``40_9``) compare as text only; they are never handed to sympy,
   where ``east`` would be the product e*a*s*t;
3. shapes (``structure``): tuples/intervals in order with the same brackets,
   sets/lists/unions as multisets, matrices cell by cell;
4. scalars: equations (``x=3`` vs ``3`` when the left side is a bare
   variable; two equations when one is a non-zero multiple of the other),
   percent (``50\\%`` = ``50`` = ``0.5`` only when one side carries ``%``),
   plain numbers exactly (``numbers``, with its decimal tolerance policy),
   then sympy: constants exactly when rational, else to 1e-40 relative at
   60 digits; expressions by ``expand``, then numeric sampling at seeded
   points (half of them negative), then ``simplify``. ``expand`` and
   ``simplify`` run only on small expressions; sampling decides the rest.

``AnswerTooLargeError`` propagates: the caller turns it into ``parse_error``.
"""

from __future__ import annotations

import random
import re

import sympy

from rlvr.verify.math.normalize import clean, split_top, squash
from rlvr.verify.math.numbers import Number, decimal_matches_exact, numbers_equal, parse_number
from rlvr.verify.math.structure import Shape, shape_of
from rlvr.verify.math.sympy_parse import AnswerTooLargeError, AnswerUnparsableError, to_sympy

_CHOICE = re.compile(r"^\(?([A-E])\)?$")
_CHOICE_PRED = re.compile(r"^\(?([A-Ea-e])\)?(?![A-Za-z0-9])")
_WORD = re.compile(r"^[A-Za-z][A-Za-z '\-]*$")
_BASE_N = re.compile(r"^\d+_\{?\d+\}?$")
_VARIABLE = re.compile(r"^(?:[a-zA-Z](?:_\{?\w+\}?)?|\\[a-zA-Z]+|[a-zA-Z]\([a-z]\))$")
_PERCENT = re.compile(r"\s*\\?%$")
_SAMPLES = 6
_REL_TOL = 1e-9
_MAX_EXPAND_POWER = 24
_MAX_SIMPLIFY_OPS = 80


def _text_form(text: str) -> str:
    return re.sub(r"^the\s+", "", squash(text).lower().replace("{", "").replace("}", ""))


def _is_word(text: str) -> bool:
    return bool(_WORD.match(text)) and re.search(r"[A-Za-z]{3,}", text) is not None


def equivalent(pred: str, gold: str) -> bool:
    """True when ``pred`` (an extracted answer) means the same as ``gold``."""
    return _equal(clean(pred), clean(gold))


def _equal(pred: str, gold: str) -> bool:
    if squash(pred) == squash(gold):
        return True
    choice = _CHOICE.match(gold)
    if choice is not None:
        m = _CHOICE_PRED.match(pred)
        return m is not None and m.group(1).upper() == choice.group(1)
    if _is_word(gold) or _is_word(pred):
        return _text_form(pred) == _text_form(gold)
    if _BASE_N.match(gold) or _BASE_N.match(pred):
        return _text_form(pred) == _text_form(gold)
    return _shapes_equal(shape_of(pred), shape_of(gold))


def _shapes_equal(pred: Shape, gold: Shape) -> bool:
    if gold.kind == "matrix" or pred.kind == "matrix":
        if pred.kind != gold.kind or len(pred.rows) != len(gold.rows):
            return False
        return all(
            len(pr) == len(gr) and all(_equal(p, g) for p, g in zip(pr, gr))
            for pr, gr in zip(pred.rows, gold.rows)
        )
    if gold.kind == "ordered":
        return (
            pred.kind == "ordered"
            and pred.brackets == gold.brackets
            and len(pred.items) == len(gold.items)
            and all(_equal(p, g) for p, g in zip(pred.items, gold.items))
        )
    if gold.kind == "unordered":
        return pred.kind == "unordered" and _multiset_equal(pred.items, gold.items)
    if pred.kind == "unordered":  # "15\frac{39}{40}, or \frac{639}{40}": every form must match
        return all(_equal(p, gold.items[0]) for p in pred.items)
    if pred.kind != "scalar":
        return False
    return _scalar_equal(pred.items[0], gold.items[0])


def _multiset_equal(pred: tuple[str, ...], gold: tuple[str, ...]) -> bool:
    if len(pred) != len(gold):
        return False
    left = list(gold)
    for p in pred:
        for k, g in enumerate(left):
            if _equal(p, g):
                del left[k]
                break
        else:
            return False
    return True


def _scalar_equal(pred: str, gold: str) -> bool:
    if squash(pred) == squash(gold):
        return True
    p_sides, g_sides = split_top(pred, "="), split_top(gold, "=")
    if len(p_sides) > 1 or len(g_sides) > 1:
        return _equations_equal(p_sides, g_sides)
    p_pct, g_pct = bool(_PERCENT.search(pred)), bool(_PERCENT.search(gold))
    pred, gold = _PERCENT.sub("", pred), _PERCENT.sub("", gold)
    if _value_equal(pred, gold):
        return True
    if p_pct != g_pct:  # 25% against 0.25
        scaled_p = f"({pred})/100" if p_pct else pred
        scaled_g = f"({gold})/100" if g_pct else gold
        pn, gn = parse_number(pred), parse_number(gold)
        if pn is not None and gn is not None:
            pv = pn.value / 100 if p_pct else pn.value
            gv = gn.value / 100 if g_pct else gn.value
            return pv == gv
        return _value_equal(scaled_p, scaled_g)
    return False


def _equations_equal(p_sides: list[str], g_sides: list[str]) -> bool:
    if any(not s for s in p_sides + g_sides):
        return False
    if len(g_sides) == 1:  # gold 3, pred x = 3 (or x = 1 + 2 = 3)
        return bool(_VARIABLE.match(p_sides[0])) and _scalar_equal(p_sides[-1], g_sides[0])
    if len(p_sides) == 1:  # gold x = 3, pred 3
        return len(g_sides) == 2 and bool(_VARIABLE.match(g_sides[0])) and _scalar_equal(p_sides[0], g_sides[1])
    if len(p_sides) != 2 or len(g_sides) != 2:
        return False
    if _VARIABLE.match(p_sides[0]) and squash(p_sides[0]) == squash(g_sides[0]):
        return _scalar_equal(p_sides[1], g_sides[1])
    try:
        pl, pr, gl, gr = (to_sympy(s) for s in (*p_sides, *g_sides))
    except AnswerUnparsableError:
        return False
    if not all(isinstance(e, sympy.Expr) for e in (pl, pr, gl, gr)):
        return False
    return _proportional(pl - pr, gl - gr)


def _value_equal(pred: str, gold: str) -> bool:
    pn, gn = parse_number(pred), parse_number(gold)
    if pn is not None and gn is not None:
        return numbers_equal(pn, gn)
    try:
        pe = to_sympy(pred)
        ge = to_sympy(gold)
    except AnswerUnparsableError:
        return False
    if isinstance(pe, sympy.Rel) or isinstance(ge, sympy.Rel):
        return pe == ge
    if not isinstance(pe, sympy.Expr) or not isinstance(ge, sympy.Expr):
        return pe == ge
    if pn is not None and pn.decimal and not ge.free_symbols:
        return _decimal_vs_constant(pn, ge)
    if gn is not None and gn.decimal and not pe.free_symbols:
        return _decimal_vs_constant(gn, pe)
    return _exprs_equal(pe, ge)


def _decimal_vs_constant(decimal: Number, exact: sympy.Expr) -> bool:
    value = _complex(exact)
    if value is None or value.imag != 0:
        return False
    return decimal_matches_exact(decimal, value.real)


def _complex(expr: sympy.Expr, subs: dict | None = None) -> complex | None:
    try:
        value = complex(sympy.N(expr, 40, subs=subs))
    except (TypeError, ValueError, OverflowError, ZeroDivisionError):
        return None
    if value != value or abs(value) == float("inf"):
        return None
    return value


def _points(symbols: list[sympy.Symbol]) -> list[dict]:
    """Seeded sample points, half of them negative (so |x| != x is seen)."""
    rng = random.Random(20240601)  # seeded: a verdict never depends on luck
    points = []
    for k in range(_SAMPLES):
        sign = 1 if k % 2 == 0 else -1
        points.append({s: sign * sympy.Rational(rng.randint(1013, 2987), 1000) for s in symbols})
    return points


def _constants_equal(pred: sympy.Expr, gold: sympy.Expr) -> bool:
    """Exact for rationals; otherwise the difference at 60 digits must be
    below 1e-40 relative, so ``\\pi + 10^{-14}`` is not ``\\pi``."""
    p, g = pred.doit(), gold.doit()
    if isinstance(p, sympy.Rational) and isinstance(g, sympy.Rational):
        return p == g
    try:
        diff = abs(sympy.N(p - g, 60))
        scale = max(sympy.Float(1), abs(sympy.N(g, 60)))
    except (TypeError, ValueError, OverflowError, ZeroDivisionError):
        return False
    if not diff.is_number or not diff.is_finite or not scale.is_finite:
        return False
    return bool(diff <= scale * sympy.Float("1e-40"))


def _exprs_equal(pred: sympy.Expr, gold: sympy.Expr) -> bool:
    if pred.has(sympy.oo, -sympy.oo, sympy.zoo) or gold.has(sympy.oo, -sympy.oo, sympy.zoo):
        return sympy.simplify(pred) == sympy.simplify(gold)
    symbols = sorted(pred.free_symbols | gold.free_symbols, key=str)
    if not symbols:
        return _constants_equal(pred, gold)
    diff = pred - gold
    # expand/simplify only where they are cheap: (x+1)^{5000} must not be expanded.
    cheap = _max_power(diff) <= _MAX_EXPAND_POWER and sympy.count_ops(diff) <= _MAX_SIMPLIFY_OPS
    if cheap and sympy.expand(diff) == 0:
        return True
    # Sampled over the union of symbols: sin^2 x + cos^2 x equals 1. The
    # difference is evaluated by sympy at 40 digits (its adaptive precision
    # sees through cancellation) and compared with the size of the values
    # themselves, in arbitrary-exponent floats: (x+1)^{5000} and
    # (x+1)^{4999} are both ~1e-1505 at x = -1.5, yet clearly different.
    agree = 0
    for point in _points(symbols):
        verdict = _agree_at(pred, gold, diff, point)
        if verdict is None:
            continue
        if not verdict:
            return False
        agree += 1
    if agree >= 3:
        return True
    return cheap and sympy.simplify(diff) == 0


def _agree_at(pred: sympy.Expr, gold: sympy.Expr, diff: sympy.Expr, point: dict) -> bool | None:
    """True/False at one point, None where it cannot be evaluated."""
    try:
        d = abs(sympy.N(diff, 40, subs=point))
        scale = sympy.Max(abs(sympy.N(pred, 40, subs=point)), abs(sympy.N(gold, 40, subs=point)))
    except (TypeError, ValueError, OverflowError, ZeroDivisionError):
        return None
    if not (d.is_number and scale.is_number and d.is_finite and scale.is_finite) or d.has(sympy.nan):
        return None
    try:
        return bool(d <= scale * sympy.Float("1e-25", 40))
    except TypeError:  # an unevaluated comparison
        return None


def _max_power(expr: sympy.Expr) -> float:
    exponents = [abs(p.exp) for p in expr.atoms(sympy.Pow) if p.exp.is_Number]
    return float(max(exponents, default=0))


def _proportional(pred: sympy.Expr, gold: sympy.Expr) -> bool:
    """``pred = 0`` and ``gold = 0`` are the same equation: pred = c * gold."""
    if pred.free_symbols != gold.free_symbols or not gold.free_symbols:
        return False
    ratios = []
    for point in _points(sorted(gold.free_symbols, key=str)):
        p, g = _complex(pred, point), _complex(gold, point)
        if p is None or g is None or abs(g) < 1e-12:
            continue
        ratios.append(p / g)
    if len(ratios) < 3 or abs(ratios[0]) < 1e-12:
        return False
    return all(abs(r - ratios[0]) <= _REL_TOL * abs(ratios[0]) for r in ratios)


__all__ = ["AnswerTooLargeError", "equivalent"]
