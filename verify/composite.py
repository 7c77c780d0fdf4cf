"""The ``composite`` verifier: a weighted sum of other verifiers, plus length shaping.

Parameters list the parts as ``{name, params, weight, component}``. The first
part is the *accuracy* part: its outcome and extracted answer become the
composite's, unless some part timed out, hit a sandbox error or failed itself
(``error``), which then wins (an infrastructure failure must never read as a plain wrong answer).
Default weights follow DAPO-style practice: 1.0 for the accuracy part, 0.2
for a ``format`` part, 1.0 for anything else. With ``overlong`` set, DAPO's
soft length penalty is added as the component ``overlong``.

Every part runs in the same worker process, one after the other, under the
pool's one timeout; or in the verifier's own process when every part may
(``rlvr.verify.inline``: ``exact``, ``random``, a linear ``regex``). Composites do not nest.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from msgspec import Meta, Struct

from rlvr.protocol.samples import Verdict
from rlvr.protocol.tasks import VerifierSpec
from rlvr.verify.registry import BoundVerifier, Verifier, VerifyContext, resolve
from rlvr.verify.shaping import OverlongParams, overlong_penalty

_DEFAULT_WEIGHTS = {"format": 0.2}
# Outcomes that override the accuracy part's, most severe first.
_FAILURES = ("sandbox_error", "timeout", "error")


class CompositePart(Struct, frozen=True, forbid_unknown_fields=True):
    # Verifier name (or "module:ATTR" import path) of this part.
    name: str
    # That verifier's own parameters.
    params: dict[str, Any] = {}
    # Weight in the sum; None: 1.0 for the first (accuracy) part, 0.2 for "format", else 1.0.
    weight: float | None = None
    # Key in Verdict.components; None: "accuracy" for the first part, else the name.
    component: str | None = None


class CompositeParams(Struct, frozen=True, forbid_unknown_fields=True):
    # The parts; the first one is the accuracy part.
    parts: Annotated[list[CompositePart], Meta(min_length=1)]
    # DAPO soft overlong penalty on the completion's token count, added with weight 1.
    overlong: OverlongParams | None = None


def part_weight(i: int, part: CompositePart) -> float:
    if part.weight is not None:
        return part.weight
    return 1.0 if i == 0 else _DEFAULT_WEIGHTS.get(part.name, 1.0)


def component_names(parts: list[CompositePart]) -> list[str]:
    names = [p.component or ("accuracy" if i == 0 else p.name) for i, p in enumerate(parts)]
    return names


_last_bound: tuple[CompositeParams, list[BoundVerifier]] | None = None


def bind_parts(p: CompositeParams) -> list[BoundVerifier]:
    """The parts, resolved; the same params object as the last call's (a group's samples
    share one) reuses that binding."""
    global _last_bound
    last = _last_bound  # read once: another thread may replace it
    if last is None or last[0] is not p:
        last = _last_bound = (p, [resolve(VerifierSpec(name=part.name, params=part.params)) for part in p.parts])
    return last[1]


def _check(p: CompositeParams) -> None:
    for i, part in enumerate(p.parts):
        if part.name == "composite":
            raise ValueError(f"part {i}: composites do not nest")
        if part.weight is not None and not math.isfinite(part.weight):
            # A nan weight makes every reward nan; an inf one, every reward ±inf or nan.
            raise ValueError(f"parts[{i}].weight must be a finite number, got {part.weight!r}")
        try:
            resolve(VerifierSpec(name=part.name, params=part.params))
        except ValueError as e:  # VerifierSpecError
            raise ValueError(f"part {i}: {e}") from None
    names = component_names(p.parts)
    if p.overlong is not None:
        names.append("overlong")
    if len(set(names)) != len(names):
        raise ValueError(f"component names must be distinct, got {names} (set `component`)")


def score_composite(completion: str, p: CompositeParams, ctx: VerifyContext) -> Verdict:
    components: dict[str, float] = {}
    verdicts = [bound(completion, ctx) for bound in bind_parts(p)]
    reward = 0.0
    for i, (key, part, v) in enumerate(zip(component_names(p.parts), p.parts, verdicts)):
        components[key] = v.reward
        reward += part_weight(i, part) * v.reward
    if p.overlong is not None:
        if ctx.completion_tokens is None:
            raise ValueError("overlong shaping needs ctx.completion_tokens")
        penalty = overlong_penalty(ctx.completion_tokens, p.overlong.max_len, p.overlong.cache_len)
        components["overlong"] = penalty
        reward += penalty
    outcome = verdicts[0].outcome
    for failure in _FAILURES:
        if any(v.outcome == failure for v in verdicts):
            outcome = failure
            break
    detail = "; ".join(f"{key}: {v.detail}" for key, v in zip(components, verdicts) if v.detail)
    return Verdict(
        reward=reward,
        outcome=outcome,
        verifier="composite",
        components=components,
        extracted=verdicts[0].extracted,
        detail=detail,
    )


COMPOSITE = Verifier("composite", CompositeParams, score_composite, check=_check)

__all__ = ["COMPOSITE", "CompositePart", "CompositeParams", "bind_parts", "component_names", "part_weight", "score_composite"]
