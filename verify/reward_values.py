"""What a reward function's return value becomes: a ``Verdict``, and never silently a zero.

``rlvr.verify.reward_fns`` calls verl's and TRL's functions; this module reads
what they return (one value per completion: a TRL list is unpacked by its
caller, a verl scorer's tuple too):

- a finite number (bool and int too): the reward; ``ok`` when it is above 0,
  else ``wrong`` (pass@k counts ``ok``);
- a dict: its ``"score"`` is the reward (verl's reward managers read it so);
  ``"acc"``, when present, decides ``ok``; its other finite numbers become
  components; ``"pred"`` (verl's ``math_dapo``: the answer it extracted) is
  the verdict's ``extracted``; anything else it holds (text, lists) is kept
  in ``detail`` as ``key=value``, so nothing the function said is lost;
- ``None`` where the convention allows it (TRL): reward 0, ``parse_error``,
  "not applicable";
- anything else (NaN, infinity, a string, a dict without ``"score"``):
  outcome ``error`` with the reason in ``detail``.

It does not call anything or bind arguments: that is ``reward_fns``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from rlvr.protocol.samples import Verdict

DETAIL_CHARS = 2000
# The dict key verl's scorers put the extracted answer under (math_dapo's {"score", "acc", "pred"}).
EXTRACTED_KEY = "pred"


def to_verdict(value: Any, *, accept_none: bool, notes: dict[str, Any] | None = None) -> Verdict:
    """The Verdict for one value a reward function returned; ``notes`` (TRL's ``log_extra`` columns)
    join the dict's non-numeric entries in ``detail``."""
    if value is None and accept_none:
        return Verdict(0.0, "parse_error", "", detail="not applicable (the reward function returned None)")
    components: dict[str, float] = {}
    kept: dict[str, Any] = dict(notes or {})
    acc: Any = None
    extracted: str | None = None
    if isinstance(value, dict):
        if "score" not in value:
            return error(f"returned a dict without 'score': {show(value)}")
        acc = value.get("acc")
        for key, x in value.items():
            if key == "score":
                continue
            if key == EXTRACTED_KEY:
                extracted = None if x is None else str(x)
            elif finite(x):
                components[str(key)] = float(x)
            else:
                kept[str(key)] = x
        value = value["score"]
    if not is_number(value):
        return error(f"returned {show(value)}, not a number")
    try:
        reward = float(value)
    except (TypeError, ValueError) as e:  # a tensor of many values, say
        return error(f"returned {show(value)}, not a number: {e}")
    if not math.isfinite(reward):
        return error(f"returned {reward!r}, not a finite reward")
    ok = bool(acc) if acc is not None else reward > 0
    detail = "; ".join(f"{k}={v!r}" for k, v in kept.items())[:DETAIL_CHARS]
    return Verdict(reward, "ok" if ok else "wrong", "", components=components, extracted=extracted, detail=detail)


def error(detail: str) -> Verdict:
    return Verdict(0.0, "error", "", detail=detail[:DETAIL_CHARS])


def is_number(x: Any) -> bool:
    """A real number: bool, int, float, numpy and torch scalars (anything with ``__float__``), not a string."""
    return isinstance(x, numbers.Real) or (hasattr(x, "__float__") and not isinstance(x, (str, bytes, complex)))


def finite(x: Any) -> bool:
    try:
        return is_number(x) and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def show(x: Any) -> str:
    text = repr(x)
    return f"{text[:200]}{'...' if len(text) > 200 else ''} ({type(x).__name__})"


__all__ = ["error", "finite", "is_number", "show", "to_verdict"]
