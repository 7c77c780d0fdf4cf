"""Step verifiers: a reward for each step of a completion, for process-supervised training.

A step verifier splits the completion into steps, checks each, and returns a
``Verdict`` whose ``reward`` is the outcome (the final answer) and whose
``steps`` hold one ``StepScore`` per checked step: where the step ends in the
text, its reward, and whether it holds. The learner turns those into
token-level advantages (``learner/algos/process.py``: DeepSeekMath's process
supervision) when ``[learn.engine.advantage] process = "steps"``; otherwise
only ``reward`` counts, as for any verifier.

**Splitting** (``split``), shared by both verifiers:

- ``"equations"`` (the default): every equation claim is a step of its own;
- ``"lines"``: each line with at least one claim is a step;
- ``"markers"``: "Step 1:", "Step 2." ... start the steps;
- ``"pattern"``: each match of the regex ``pattern`` is a step.

A step holds when every claim in it holds; a step with no claim is not a
step (it is not scored). A completion with no step is ``parse_error``. With
a ``gold`` answer the answer is a step too (``answer_step``): the last step
holds only if its result is the answer (or, when text follows the last step,
the answer is one more step at the end of the text). Without it, process
rewards pay a completion for stopping after its easy steps: the chain example
learned exactly that (docs/benchmarks.md).

**arith_steps** checks arithmetic: each ``expr = expr`` between numbers and
``+ - * / // % ** ( )`` (read by ``rlvr.sandbox.arith``, never ``eval``) must
hold to ``tolerance``. ``chain = "running"`` reads a running total instead:
in ``12+34=46+56=102`` each part after the first starts with the value of
the one before (12+34 is 46, then 46+56 is 102), the format of the built-in
chain example. The final answer is the value of the last claim; the outcome
is right when it equals ``gold``.

**math_steps** checks mathematics with the math verifier's engine
(math-verify and sympy, behind its guards): each equation inside ``$...$``,
``\\(...\\)`` or ``\\[...\\]`` (or a line that is one) is split at ``=``, and
consecutive sides must be equal. The outcome is the ``math`` verifier's
verdict on the whole completion against ``gold``.

Rewards: ``step_right`` / ``step_wrong`` per step (1 / 0 by default); the
outcome reward is 1 / 0, or ``outcome = "steps"`` makes it the fraction of
steps that hold.
"""

from __future__ import annotations

import math
import re
import time
from typing import Literal

from msgspec import Struct

from rlvr.protocol.samples import StepScore, Verdict
from rlvr.sandbox.arith import CalculatorInputError, evaluate
from rlvr.verify.registry import Verifier, VerifyContext

Split = Literal["equations", "lines", "markers", "pattern"]
_MARKER = re.compile(r"(?i)\bstep[ \t]*\d+[ \t]*[:.)]")
# A run of arithmetic with at least one "=", e.g. "12 + 34 = 46", "(3*4) = 12 = 6*2": expressions of
# numbers joined by operators (spaces only around operators and "=", so "2 2+2" is two runs).
_NUM = r"\d+(?:\.\d+)?"
_ATOM = rf"[-+]?\(*[ \t]*{_NUM}[ \t]*\)*"
_EXPR = rf"{_ATOM}(?:[ \t]*(?:\*\*|//|[+\-*/×÷^%])[ \t]*{_ATOM})*"
_ARITH_RUN = re.compile(rf"{_EXPR}(?:[ \t]*=[ \t]*{_EXPR})+")
_LEADING_NUMBER = re.compile(r"\s*[-+]?\d+(?:\.\d+)?")
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_EQ_SPLIT = re.compile(r"(?<![<>!\\])=(?!=)")
MAX_STEPS = 512


class StepParams(Struct, frozen=True, forbid_unknown_fields=True):
    # The right final answer (None: no outcome check; the outcome is the steps' share).
    gold: str | None = None
    split: Split = "equations"
    # split = "pattern": each match of this regex is one step.
    pattern: str | None = None
    # Reward of a step that holds, and of one that does not.
    step_right: float = 1.0
    step_wrong: float = 0.0
    # The verdict's reward: the final answer ("final": 1 or 0) or the share of steps that hold ("steps").
    outcome: Literal["final", "steps"] = "final"
    # With a gold answer, the answer is a step too: the last step holds only if its result is the
    # answer, so a completion that stops after its easy steps, or ends on a wrong result, ends on a
    # failed step (without it, process rewards pay for stopping early).
    answer_step: bool = True


class ArithStepsParams(StepParams, frozen=True, forbid_unknown_fields=True):
    # "equal": every "=" asserts its two sides are equal; "running": a chain of running totals.
    chain: Literal["equal", "running"] = "equal"
    # Relative tolerance of a numeric comparison.
    tolerance: float = 1e-9


class _Claim(Struct, frozen=True):
    end: int  # character offset just past the claim
    ok: bool
    value: float | None  # the claimed result (arith_steps), for the final answer


def _segments(text: str, p: StepParams) -> list[tuple[int, int]]:
    """(start, end) of each candidate step; ``equations`` is one segment split later per claim."""
    if p.split == "lines":
        out, at = [], 0
        for line in text.splitlines(keepends=True):
            out.append((at, at + len(line.rstrip("\r\n"))))
            at += len(line)
        return out
    if p.split == "markers":
        starts = [m.start() for m in _MARKER.finditer(text)]
        return [(a, b) for a, b in zip(starts, starts[1:] + [len(text)])] if starts else []
    if p.split == "pattern":
        return [(m.start(), m.end()) for m in re.finditer(p.pattern or "", text) if m.end() > m.start()]
    return [(0, len(text))]


def _close(a: float, b: float, tol: float) -> bool:
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)


def _arith_claims(text: str, start: int, end: int, p: ArithStepsParams) -> list[_Claim]:
    claims = []
    for run in _ARITH_RUN.finditer(text, start, end):
        parts, offsets, at = [], [], run.start()
        for piece in run.group().split("="):
            parts.append(piece)
            offsets.append(at)
            at += len(piece) + 1
        for j in range(len(parts) - 1):
            left, right = parts[j], parts[j + 1]
            try:
                lv = float(evaluate(left))
                if p.chain == "running" and j + 1 < len(parts) - 1:
                    lead = _LEADING_NUMBER.match(right)
                    if lead is None:
                        break
                    rv, claim_end = float(lead.group()), offsets[j + 1] + lead.end()
                else:
                    rv, claim_end = float(evaluate(right)), offsets[j + 1] + len(right.rstrip())
            except (CalculatorInputError, OverflowError, ValueError):
                break  # not arithmetic after all (a date, a ratio in prose): no claim here
            claims.append(_Claim(claim_end, _close(lv, rv, p.tolerance), rv))
    return claims


def _math_claims(text: str, start: int, end: int) -> list[_Claim]:
    from rlvr.verify.math.engine import AnswerTooLargeError, parse_answer, same

    spans = [(m.start(), m.end(), next(g for g in m.groups() if g is not None)) for m in _MATH_SPAN.finditer(text, start, end)]
    if not spans:
        line = text[start:end]
        if _EQ_SPLIT.search(line) and sum(c.isalpha() for c in line) < 0.5 * max(1, len(line.strip())):
            spans = [(start, start + len(line.rstrip()), line)]
    claims = []
    for _, span_end, body in spans:
        sides = [s.strip() for s in _EQ_SPLIT.split(body)]
        if len(sides) < 2 or not all(sides):
            continue
        try:
            parsed = [parse_answer(s) for s in sides]
            ok = all(same(a, b) for a, b in zip(parsed, parsed[1:]))
        except AnswerTooLargeError:
            ok = False
        claims.append(_Claim(span_end, ok, None))
    return claims


def _steps(text: str, p: StepParams, claims_of) -> list[tuple[int, bool, list[_Claim]]]:
    """(end, holds, claims) of each step, in order, at most MAX_STEPS."""
    out: list[tuple[int, bool, list[_Claim]]] = []
    for a, b in _segments(text, p):
        claims = claims_of(text, a, b)
        if p.split == "equations":
            out += [(c.end, c.ok, [c]) for c in claims]
        elif claims:
            out.append((b, all(c.ok for c in claims), claims))
    # Ends strictly increase (a step that ends where the last one did is folded into it).
    merged: list[tuple[int, bool, list[_Claim]]] = []
    for end, ok, claims in out:
        if merged and end <= merged[-1][0]:
            last = merged[-1]
            merged[-1] = (last[0], last[1] and ok, last[2] + claims)
        else:
            merged.append((end, ok, claims))
    return merged[:MAX_STEPS]


def _verdict(name: str, steps, p: StepParams, final_ok: bool | None, extracted: str | None,
             started: float, detail: str = "", text_len: int = 0) -> Verdict:
    if p.answer_step and final_ok is not None:
        end, ok, claims = steps[-1]
        if end >= text_len:  # the last step ends the text: it holds only if its result is the answer
            steps = steps[:-1] + [(end, ok and final_ok, claims)]
        else:  # the text goes on past the last step: the answer is a step of its own
            steps = steps + [(text_len, final_ok, [])]
    scores = [StepScore(end, p.step_right if ok else p.step_wrong, ok) for end, ok, _ in steps]
    share = sum(s.ok for s in scores) / len(scores)
    if p.outcome == "steps" or final_ok is None:
        reward, right = share, share == 1.0
    else:
        reward, right = (1.0 if final_ok else 0.0), final_ok
    return Verdict(reward, "ok" if right else "wrong", name,
                   components={"accuracy": 1.0 if final_ok else 0.0, "steps_right": share, "steps": float(len(scores))},
                   extracted=extracted, latency_s=time.perf_counter() - started, detail=detail, steps=scores)


def _arith(completion: str, p: ArithStepsParams, ctx: VerifyContext) -> Verdict:
    started = time.perf_counter()
    steps = _steps(completion, p, lambda t, a, b: _arith_claims(t, a, b, p))
    if not steps:
        return Verdict(0.0, "parse_error", "arith_steps", detail="no arithmetic step (expr = value) found",
                       latency_s=time.perf_counter() - started)
    final = steps[-1][2][-1].value
    final_ok = None
    if p.gold is not None:
        try:
            final_ok = final is not None and _close(final, float(evaluate(p.gold)), p.tolerance)
        except CalculatorInputError:
            final_ok = final is not None and str(p.gold).strip() == f"{final:g}"
    shown = None if final is None else (str(int(final)) if final.is_integer() else f"{final:g}")
    return _verdict("arith_steps", steps, p, final_ok, shown, started, text_len=len(completion.rstrip()))


def _math(completion: str, p: StepParams, ctx: VerifyContext) -> Verdict:
    from rlvr.verify.math import MathParams, score_math

    started = time.perf_counter()
    steps = _steps(completion, p, _math_claims)
    if not steps:
        return Verdict(0.0, "parse_error", "math_steps", detail="no equation step found",
                       latency_s=time.perf_counter() - started)
    final_ok, extracted, detail = None, None, ""
    if p.gold is not None:
        outcome = score_math(completion, MathParams(gold=p.gold))
        final_ok, extracted, detail = outcome.outcome == "ok", outcome.extracted, outcome.detail
    return _verdict("math_steps", steps, p, final_ok, extracted, started, detail, text_len=len(completion.rstrip()))


def _check_pattern(p: StepParams) -> None:
    if p.split == "pattern":
        if not p.pattern:
            raise ValueError("split = 'pattern' needs a pattern")
        re.compile(p.pattern)


ARITH_STEPS = Verifier("arith_steps", ArithStepsParams, _arith, check=_check_pattern)
MATH_STEPS = Verifier("math_steps", StepParams, _math, check=_check_pattern)
