"""The ``reasoning_gym`` verifier: a reasoning-gym task's own ``score_answer``, in the verify role.

Params (set by the learner's ``reasoning_gym`` dataset kind): the task's
name, the config its dataset was built with, the entry (question, answer,
metadata), how to find the answer in a completion, and whether the reward is
binary. The worker rebuilds the task's dataset from the config (once per
config and process), finds the answer, and calls ``score_answer(answer,
entry)``: the reward is that score, or with ``binary`` 1 for a full score
and 0 otherwise.

Outcomes: ``ok`` for a full score (1), ``wrong`` below it; ``parse_error``
when no answer was found (the reward is still ``score_answer(None, entry)``,
which some tasks floor at 0.01) or when ``score_answer`` itself refuses the
answer (it raises on some unparsable inputs: prime_factorization);
``error`` when it returns something that is not a finite number.

Answers found: ``answer_tag`` is reasoning-gym's own ``extract_answer`` (the
last ``<answer>...</answer>``), ``boxed`` the last ``\\boxed{...}``, ``whole``
the completion stripped. The ARC tasks compare tuples that do not survive
the wire, so their entry is regenerated from the config rather than taken
from the message.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any, Literal

from msgspec import Struct

from rlvr.protocol.samples import Verdict
from rlvr.verify.registry import Verifier, VerifyContext

# Tasks whose score_answer compares values (tuples) that msgpack turns into lists.
_REGENERATE = ("arc_agi", "rearc")


class ReasoningGymParams(Struct, frozen=True, forbid_unknown_fields=True):
    # The reasoning-gym task name (e.g. "chain_sum").
    task: str
    # The entry to score against: {question, answer, metadata}.
    entry: dict[str, Any]
    # The config the task's dataset was built with (create_dataset's keywords).
    config: dict[str, Any] = {}
    # Where the answer is: the last <answer>...</answer>, the last \boxed{...}, or the whole completion.
    answer_format: Literal["answer_tag", "boxed", "whole"] = "answer_tag"
    # 1 for a full score, 0 otherwise, instead of the score itself.
    binary: bool = False


def find_answer(completion: str, answer_format: str) -> str | None:
    if answer_format == "answer_tag":
        from reasoning_gym.utils import extract_answer

        return extract_answer(completion)
    if answer_format == "boxed":
        from rlvr.verify.math.extract import extract_boxed

        found = extract_boxed(completion)
        return None if found is None else found.strip()
    return completion.strip()


@lru_cache(maxsize=64)
def _dataset(task: str, config_json: str):
    import reasoning_gym

    return reasoning_gym.create_dataset(task, **json.loads(config_json))


def score_reasoning_gym(completion: str, p: ReasoningGymParams, ctx: VerifyContext) -> Verdict:
    ds = _dataset(p.task, json.dumps(p.config, sort_keys=True))
    entry = p.entry
    if p.task in _REGENERATE:
        entry = ds[int(entry["metadata"]["source_index"])]
    answer = find_answer(completion, p.answer_format)
    try:
        score = ds.score_answer(answer, entry)
    except Exception as e:  # reasoning-gym refusing an answer it cannot parse
        return Verdict(0.0, "parse_error", p.task, extracted=answer,
                       detail=f"score_answer refused the answer: {type(e).__name__}: {e}"[:2000])
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        return Verdict(0.0, "error", p.task, extracted=answer, detail=f"score_answer returned {score!r}")
    score = float(score)
    reward = (1.0 if score >= 1.0 else 0.0) if p.binary else score
    if answer is None:
        outcome = "parse_error"
    else:
        outcome = "ok" if score >= 1.0 else "wrong"
    detail = f"route={p.answer_format}; score_answer={score:g}" if answer is not None else f"no {p.answer_format} answer"
    return Verdict(reward, outcome, p.task, components={"score": score}, extracted=answer, detail=detail)


def _warmup() -> None:
    import reasoning_gym  # noqa: F401  (about a second: every task module)


REASONING_GYM = Verifier("reasoning_gym", ReasoningGymParams, score_reasoning_gym, warmup=_warmup)

__all__ = ["REASONING_GYM", "ReasoningGymParams", "find_answer", "score_reasoning_gym"]
