"""``score_math``: locate the final answer, read it and the gold with
math-verify, decide with the project's policies, and return a ``Verdict``.

The response and the gold go through the same reading (``read``), so a gold
that is a whole worked solution has its final answer extracted exactly as a
response's is. Golds are read once per worker process (an LRU keyed by the
gold string): the samples of one task share a gold. math-verify parses a
short, harmless gold only when a decision needs it (``Gold``): a response
written as the gold is, or a plain number against a plain number, never does.

``Verdict.detail`` always starts with ``route=<route>``: how the answer was
found (``boxed``, ``answer_is``, ``hashes``, ``bare``, ``prose``,
``last_number`` or ``none``), then the gold's route and the policy that
decided (see ``policy``), so an audit shows why an answer was judged wrong.

Pure and synchronous. It runs in the main thread of a killable worker
process, and that pool enforces the hard wall-clock limit, so no SIGALRM is
armed here. What it does itself is refuse the absurd before any parsing:
over-long responses are cut to their tail, and an answer that is too long,
nested too deeply or whose evaluation would explode ends as ``parse_error``.
It does not know about workers, NATS or composite rewards.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Literal

import msgspec
import sympy
from msgspec import Meta
from sympy.core.function import AppliedUndef

from rlvr.protocol.samples import Verdict
from rlvr.verify.math import forms, policy
from rlvr.verify.math.engine import (
    MAX_SUPERSCRIPT_DEPTH,
    AnswerTooLargeError,
    Parsed,
    parse_answer,
    parse_prose,
    same,
    superscript_depth,
)
from rlvr.verify.math.extract import Strictness, extract_answer, extract_last_number, is_bare

VERIFIER = "math"
PROSE_TAIL = 4_000  # prose is searched in its last this-many chars only
GOLD_CACHE = 4_096


class MathParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    gold: str
    # How far extraction may fall back: boxed only; boxed, "the answer is",
    # "####" and a bare answer; or also a search of prose and, last, the
    # last number in the text.
    strictness: Literal["boxed", "answer", "last_number"] = "last_number"
    # Only the last this-many characters of a response are searched; the
    # final answer is at the end, and this bounds every scan.
    max_response_chars: Annotated[int, Meta(gt=0)] = 200_000
    max_answer_chars: Annotated[int, Meta(gt=0)] = 1_000
    max_answer_depth: Annotated[int, Meta(gt=0)] = 24
    # An answer that is arithmetic on plain numbers left undone ("\\boxed{6 + 7}"
    # for "What is 6 + 7?") restates the question: "reject" scores it wrong
    # (policy=undone) unless the gold is written the same way; "accept" takes
    # math-verify's word that it equals the gold. A policy learns to box the
    # question within minutes when this is accepted (docs/verifiers.md).
    undone_arithmetic: Literal["reject", "accept"] = "reject"


class AnswerRefusedError(ValueError):
    """An answer too long or too deeply nested to be read at all."""


@dataclass(frozen=True)
class Reading:
    span: str  # the located answer, localised
    route: str
    raw: str  # the located answer as written
    parsed: Parsed | None  # None until math-verify was needed


def _nesting(text: str) -> int:
    depth = best = 0
    for c in text:
        if c in "([{":
            depth += 1
            best = max(best, depth)
        elif c in ")]}":
            depth -= 1
    return best


def _check(span: str, params: MathParams) -> None:
    if len(span) > params.max_answer_chars:
        raise AnswerRefusedError(f"answer longer than {params.max_answer_chars} chars")
    if _nesting(span) > params.max_answer_depth:
        raise AnswerRefusedError(f"answer nested deeper than {params.max_answer_depth}")


def read(text: str, strictness: Strictness, params: MathParams) -> Reading | None:
    """Locate and read one answer; None when there is none."""
    answer, route = extract_answer(text, strictness)
    if route == "prose":
        tail = policy.localise_prose(text[-PROSE_TAIL:])
        parsed = parse_prose(tail)
        if parsed.values and not policy.unevaluated(parsed.text, tail):
            shown = parsed.text or str(parsed.value)
            span = policy.localise(shown)
            return Reading(span, "prose", shown, parsed if span == shown else None)
        # "40 + 20 = 60 ... not a 40 + 20 calculator": the last result stated
        # after "=" is the better last resort, then the last number.
        answer, route = policy.last_result(tail) or extract_last_number(tail), "last_number"
    if answer is None:
        return None
    _check(answer, params)
    if route in ("answer_is", "hashes") and not is_bare(answer):
        # "Final Answer: The largest $n$ is 34": the marker's sentence is
        # prose, so math-verify searches it rather than reading it whole.
        parsed = parse_prose(policy.localise_prose(answer))
        if parsed.values and parsed.text:
            span = policy.localise(parsed.text)
            return Reading(span, route, parsed.text, parsed if span == parsed.text else None)
    return Reading(policy.localise(answer), route, answer, None)


def parsed_of(reading: Reading) -> Parsed:
    return reading.parsed if reading.parsed is not None else parse_answer(reading.span)


# A gold whose parsing may wait until a decision needs it: one that cannot
# make the engine's guard refuse it. At most LAZY_GOLD_CHARS characters (far
# fewer than MAX_NODES nodes; ``_check``'s length and nesting limits ran
# already) and LAZY_GOLD_DIGITS digits; superscripts of one character or
# ``\circ`` only, nested no deeper than the engine allows, so no huge power
# or integer (at most (10^40)^9); no factorial, binomial, sum, product,
# integral, limit or ``\pm`` (which multiplies the readings). Any other gold is
# parsed at once, so a gold the guard refuses is "gold unreadable" whatever
# the response, exactly as when every gold was parsed first.
LAZY_GOLD_CHARS = 120
LAZY_GOLD_DIGITS = 40
_LAZY_GOLD_REFUSED = re.compile(
    r"!|\\(?:[dt]?binom|choose|sum|prod|[io]+int|int|lim|Gamma|gamma|factorial|pm|mp|operatorname|mathbf)"
    r"|\^(?!\s*(?:[0-9A-Za-z]|\{\s*[0-9A-Za-z]\s*\}|\\circ\b|\{\s*\\circ\s*\}))"
)


def _lazy_gold(span: str) -> bool:
    return (
        len(span) <= LAZY_GOLD_CHARS
        and sum(c.isdigit() for c in span) <= LAZY_GOLD_DIGITS
        and _LAZY_GOLD_REFUSED.search(span) is None
        and superscript_depth(span) <= MAX_SUPERSCRIPT_DEPTH
    )


class Gold:
    """The gold's reading; math-verify's parse of it (``parsed``) is made on
    first use and kept, so a response written as the gold is (``identical``)
    or a plain number against a plain number never needs it."""

    __slots__ = ("_parsed", "reading")

    def __init__(self, reading: Reading) -> None:
        self.reading = reading
        self._parsed: Parsed | None = None
        if reading.parsed is not None:
            self._parsed = reading.parsed
        elif not _lazy_gold(reading.span):
            self._parsed = parse_answer(reading.span)  # AnswerTooLargeError here: gold unreadable

    @property
    def parsed(self) -> Parsed:
        if self._parsed is None:
            self._parsed = parse_answer(self.reading.span)
        return self._parsed


@lru_cache(maxsize=GOLD_CACHE)
def _gold(gold: str) -> Gold | None:
    params = MathParams(gold=gold)
    reading = read(gold, "last_number", params)
    return None if reading is None else Gold(reading)


def decide(pred: Reading, gold_of: Gold) -> tuple[bool, str]:
    """``(equivalent, policy)`` for a located answer against the gold."""
    gold = gold_of.reading
    if pred.span.replace(" ", "") == gold.span.replace(" ", ""):
        return True, "identical"  # the gold as written: nothing to parse
    letter = policy.choice_of(gold.span)
    if letter is not None:
        return policy.pred_choice(pred.span) == letter, "choice"
    gold_time, pred_time = policy.time_of(gold.span), policy.time_of(pred.span)
    pred_ratio, gold_ratio = forms.ratio_of(pred.span), forms.ratio_of(gold.span)
    if pred_ratio is not None and gold_ratio is not None:
        # A labelled ratio (V_1:V_2 = 11:21) is never a time; two bare ones (11:21) may be.
        if pred_ratio.labelled or gold_ratio.labelled or (gold_time is None and pred_time is None):
            return forms.ratios_equal(pred_ratio, gold_ratio), "ratio"
    if gold_time is not None or pred_time is not None:
        return pred_time == gold_time, "time"
    result = policy.stated_result(pred.span)
    if result is not None:  # 3 \times 12 = 36: the result stated after the arithmetic
        return decide(Reading(result, pred.route, pred.raw, None), gold_of)[0], "result"
    if policy.is_word(gold.span) or policy.is_word(pred.span):
        return policy.words_equal(pred.span, gold.span), "word"
    if policy.is_base_n(gold.span) or policy.is_base_n(pred.span):
        return policy.base_n_equal(pred.span, gold.span), "base_n"
    gold_number = policy.number_of(gold.span) or policy.number_of(gold_of.parsed.text)
    span = pred.span
    written = policy.number_of(span)
    gold_comma = policy.decimal_comma(gold.span)
    if gold_comma is not None and written is not None and written.decimal:
        gold_number = policy.number_of(gold_comma)  # gold 1,22 against a response 1.22
    if gold_number is not None:
        comma = policy.decimal_comma(span)
        if comma is not None:
            span, pred = comma, Reading(comma, pred.route, pred.raw, None)
    pred_number = policy.number_of(span)
    verdict = policy.numbers_decide(pred_number, gold_number)
    if verdict is not None:
        return verdict, "number"
    parsed = parsed_of(pred)
    gold_parsed = gold_of.parsed
    pred_number = pred_number or policy.number_of(parsed.text)
    verdict = policy.numbers_decide(pred_number, gold_number)
    if verdict is not None:
        return verdict, "number"
    for decimal, exact in ((pred_number, gold_parsed.value), (gold_number, parsed.value)):
        if decimal is not None and decimal.decimal:
            verdict = policy.tolerance(decimal, exact)
            if verdict is not None:
                return verdict, "tolerance"
    rows = _rows(gold_parsed.value)
    if rows is not None:
        verdict = policy.elementwise_tolerance(span, rows)
        pb, gb = policy.brackets(span), policy.brackets(gold.span)
        if verdict is not None and not (pb and gb and pb != gb):
            return verdict, "decimal_in_structure"
    if _is_equation(parsed.value) and not _is_equation(gold_parsed.value) and not _is_assignment(parsed.value):
        return False, "equation"
    if _is_ordered(gold_parsed) and _is_set(parsed) and not span.lstrip().startswith(("(", "[", "\\{", "\\left")):
        parsed = parse_answer(f"({span})")
        return same(gold_parsed, parsed), "ordered"
    if same(gold_parsed, parsed):
        pb, gb = policy.brackets(span), policy.brackets(gold.span)
        if pb and gb and pb != gb:
            return False, "brackets"
        return True, "math_verify"
    return False, "math_verify"


def _rows(value: object) -> list[list[object]] | None:
    """A matrix's entries row by row (``\\frac{1}{12}\\begin{pmatrix}...`` multiplied out), a tuple's
    items or an interval's ends as one row; None for anything else."""
    if isinstance(value, sympy.MatrixExpr) and not isinstance(value, sympy.MatrixBase):
        try:
            value = value.as_explicit()
        except (TypeError, ValueError, AttributeError):  # a symbolic shape: not plain entries
            return None
    if isinstance(value, sympy.MatrixBase):
        return [list(value.row(i)) for i in range(value.rows)]
    if isinstance(value, sympy.Tuple):
        return [list(value.args)]
    if isinstance(value, sympy.Interval):
        return [[value.start, value.end]]
    return None


def _is_equation(value: object) -> bool:
    return isinstance(value, sympy.Eq)


def _is_name(value: object) -> bool:
    return isinstance(value, sympy.Symbol | AppliedUndef)


def _is_assignment(value: object) -> bool:
    """``x = 3``, ``f(x) = ...``, ``x = 1 + 2 = 3``, ``(x, y) = (5, 8)``: a name on the left; also a
    ratio of two names (``\\frac{V_1}{V_2} = \\frac{11}{21}``, ``V_1:V_2 = 11:21``) and a matrix's name
    (``A^{-1} = \\begin{pmatrix}...``)."""
    while isinstance(value, sympy.Eq) and isinstance(value.lhs, sympy.Eq):
        value = value.lhs
    if not isinstance(value, sympy.Eq):
        return False
    lhs = value.lhs
    if isinstance(lhs, sympy.Tuple):
        return all(_is_name(n) for n in lhs.args)
    if isinstance(lhs, sympy.Mul) and len(lhs.args) == 2:  # V_1/V_2: a name times a name to the -1
        inverse = [a for a in lhs.args if isinstance(a, sympy.Pow) and _is_name(a.base) and a.exp == -1]
        return len(inverse) == 1 and any(_is_name(a) for a in lhs.args)
    if isinstance(value.rhs, sympy.MatrixBase) and isinstance(lhs, sympy.Pow):  # A^{-1}, A^T
        return _is_name(lhs.base) and (lhs.exp == -1 or _is_name(lhs.exp))
    return _is_name(lhs)


def _is_ordered(parsed: Parsed) -> bool:
    return isinstance(parsed.value, sympy.Interval | sympy.Tuple)


def _is_set(parsed: Parsed) -> bool:
    return isinstance(parsed.value, sympy.FiniteSet)


def _verdict(reward: float, outcome: str, extracted: str | None, started: float, detail: str) -> Verdict:
    return Verdict(
        reward=reward,
        outcome=outcome,  # type: ignore[arg-type]
        verifier=VERIFIER,
        components={"accuracy": reward},
        extracted=extracted,
        latency_s=time.perf_counter() - started,
        detail=detail,
    )


def score_math(response: str, params: MathParams) -> Verdict:
    """Reward 1.0 when the located answer is equivalent to ``params.gold``.

    Outcomes: ``ok`` (equivalent), ``wrong`` (an answer was found and is not
    equivalent), ``parse_error`` (no answer found, or one too absurd to
    evaluate; also a gold in which no answer can be found)."""
    started = time.perf_counter()
    text = response[-params.max_response_chars :]
    try:
        gold_of = _gold(params.gold)
    except (AnswerTooLargeError, AnswerRefusedError, RecursionError) as exc:
        return _verdict(0.0, "parse_error", None, started, f"route=none; gold unreadable: {exc}")
    if gold_of is None:
        return _verdict(0.0, "parse_error", None, started, "route=none; no answer found in the gold")
    gold = gold_of.reading
    try:
        pred = read(text, params.strictness, params)
    except AnswerRefusedError as exc:
        return _verdict(0.0, "parse_error", None, started, f"route=refused; {exc}")
    except AnswerTooLargeError as exc:
        return _verdict(0.0, "parse_error", None, started, f"route=refused; answer too large to evaluate: {exc}")
    if pred is None:
        return _verdict(0.0, "parse_error", None, started, f"route=none; no answer found (strictness={params.strictness})")
    shown = pred.raw[:200]
    where = f"route={pred.route}; gold={gold.route}"
    try:
        ok, how = decide(pred, gold_of)
    except AnswerTooLargeError as exc:
        return _verdict(0.0, "parse_error", shown, started, f"{where}; answer too large to evaluate: {exc}")
    except RecursionError:
        return _verdict(0.0, "parse_error", shown, started, f"{where}; answer too deeply nested for the parser")
    if (ok and how != "identical" and params.undone_arithmetic == "reject" and pred.route != "prose"
            and policy.undone(pred.span)):  # prose has its own rule (policy.unevaluated)
        return _verdict(0.0, "wrong", shown, started,
                        f"{where}; policy=undone; arithmetic left undone restates the question")
    if ok:
        return _verdict(1.0, "ok", shown, started, f"{where}; policy={how}; equivalent")
    return _verdict(0.0, "wrong", shown, started, f"{where}; policy={how}; not equivalent")


__all__ = ["MathParams", "score_math"]
