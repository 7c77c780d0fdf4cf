"""``score_math``: extract the final answer, compare it with the gold, and
return a ``Verdict``.

Pure and synchronous. It runs in the main thread of a killable worker
process, and that pool enforces the hard wall-clock limit, so no SIGALRM is
armed here (see ``sympy_parse``). What this module does itself is refuse the
absurd before any parsing: over-long responses are cut to their tail, and an
extracted answer that is too long or nested too deeply, or whose evaluation
would explode, ends as ``parse_error`` at once.

It does not know about workers, NATS or composite rewards.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from rlvr.protocol.samples import Verdict
from rlvr.verify.math.equivalence import equivalent
from rlvr.verify.math.extract import extract_answer
from rlvr.verify.math.normalize import nesting_depth
from rlvr.verify.math.sympy_parse import AnswerTooLargeError

VERIFIER = "math"


class MathParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    gold: str
    # How far extraction may fall back: boxed only; boxed, "the answer is"
    # and "####"; or also the last number in the text.
    strictness: Literal["boxed", "answer", "last_number"] = "last_number"
    # Only the last this-many characters of a response are searched; the
    # final answer is at the end, and this bounds every scan.
    max_response_chars: Annotated[int, Meta(gt=0)] = 200_000
    max_answer_chars: Annotated[int, Meta(gt=0)] = 1_000
    max_answer_depth: Annotated[int, Meta(gt=0)] = 24


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
    """Reward 1.0 when the extracted answer is equivalent to ``params.gold``.

    Outcomes: ``ok`` (equivalent), ``wrong`` (an answer was found and is not
    equivalent), ``parse_error`` (no answer found, or one too absurd to
    evaluate)."""
    started = time.perf_counter()
    text = response[-params.max_response_chars :]
    answer, how = extract_answer(text, params.strictness)
    if answer is None:
        return _verdict(0.0, "parse_error", None, started, f"no answer found (strictness={params.strictness})")
    shown = answer[:200]
    if len(answer) > params.max_answer_chars:
        return _verdict(0.0, "parse_error", shown, started, f"answer longer than {params.max_answer_chars} chars")
    if nesting_depth(answer) > params.max_answer_depth:
        return _verdict(0.0, "parse_error", shown, started, f"answer nested deeper than {params.max_answer_depth}")
    try:
        same = equivalent(answer, params.gold)
    except AnswerTooLargeError as exc:
        return _verdict(0.0, "parse_error", shown, started, f"answer too large to evaluate: {exc}")
    except RecursionError:
        return _verdict(0.0, "parse_error", shown, started, "answer too deeply nested for the parser")
    if same:
        return _verdict(1.0, "ok", answer, started, f"equivalent ({how})")
    return _verdict(0.0, "wrong", answer, started, f"not equivalent ({how})")


__all__ = ["MathParams", "score_math"]
