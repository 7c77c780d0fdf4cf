"""Reward functions as users already have them: verl's ``compute_score`` and TRL's ``reward_func``.

``[verify] plugins`` (and ``rlvr-actor audit|eval --verifier``) take a
``"package.module:ATTR"`` path. Besides a ``Verifier`` object, ATTR may be a
plain function, recognised by its parameter names (``adapt``):

- **verl**: ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)``,
  returning a number or a dict whose ``"score"`` is the reward. It is called
  with keywords, as verl calls it: ``data_source`` is the record's
  ``data_source`` (else the task's dataset name), ``solution_str`` the
  completion, ``ground_truth`` the dataset's answer (``params.gold``: verl's
  ``reward_model.ground_truth``), ``extra_info`` the record's ``extra_info``.
- **TRL**: ``reward_func(prompts, completions, **kwargs) -> list[float | None]``,
  called for one completion at a time: ``prompts=[prompt]``,
  ``completions=[completion]`` (for a chat prompt, both are message lists:
  ``[{"role": "assistant", "content": text}]``), ``completion_ids=[ids]``, and
  every other column of the record as a keyword, a list of one value.
  ``None`` means "not applicable".

What comes back becomes a ``Verdict``, and never silently a zero:

- a finite number (bool and int too): the reward; ``ok`` when it is above
  0, else ``wrong`` (pass@k counts ``ok``). A dict's other finite numbers
  become components; a dict's ``"acc"``, when present, decides ``ok``;
- ``None`` (TRL): reward 0, outcome ``parse_error``, detail "not applicable";
- an exception, NaN or infinity, a string, a dict without ``"score"``:
  outcome ``error`` with the reason in ``detail`` (the learner drops it as
  ``verify_failed``, as it drops timeouts).

A function that hangs is the pool's to stop: it runs in a killable worker
under ``verify.timeout_s`` like every verifier, and its verdict is ``timeout``.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable
from typing import Any

from msgspec import Struct

from rlvr.protocol.samples import Verdict
from rlvr.verify.registry import Verifier, VerifierPluginError, VerifyContext

VERL_PARAMS = ("data_source", "solution_str", "ground_truth")
TRL_PARAMS = ("prompts", "completions")
_DETAIL_CHARS = 2000


class RewardFnParams(Struct, frozen=True):
    """What a task tells a reward function besides its record (``VerifyContext.record``)."""

    # The dataset's answer: verl's ground_truth (the dataset's answer_field); None when absent.
    gold: Any = None


def kind_of(fn: Callable) -> str | None:
    """"verl" or "trl" when ``fn``'s signature is one of theirs, else None."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C function without a signature
        return None
    names = list(params)
    if all(n in params for n in VERL_PARAMS):
        return "verl"
    if names[:2] == list(TRL_PARAMS) or (
        all(n in params for n in TRL_PARAMS) and any(p.kind is p.VAR_KEYWORD for p in params.values())
    ):
        return "trl"
    return None


def adapt(obj: Any, path: str) -> Verifier:
    """``obj`` (what ``path`` names) as a ``Verifier``; ``VerifierPluginError`` when it is none of the three."""
    if isinstance(obj, Verifier):
        return obj
    if callable(obj):
        kind = kind_of(obj)
        if kind == "verl":
            return Verifier(path, RewardFnParams, _verl_caller(obj))
        if kind == "trl":
            return Verifier(path, RewardFnParams, _trl_caller(obj))
    raise VerifierPluginError(
        f"plug-in {path!r} is neither a Verifier object nor a reward function with verl's signature "
        "compute_score(data_source, solution_str, ground_truth, extra_info=None) or TRL's "
        "reward_func(prompts, completions, **kwargs)"
    )


def _verl_caller(fn: Callable) -> Callable[[str, RewardFnParams, VerifyContext], Verdict]:
    def call(completion: str, params: RewardFnParams, ctx: VerifyContext) -> Verdict:
        record = ctx.record
        try:
            value = fn(
                data_source=record.get("data_source", ctx.dataset), solution_str=completion,
                ground_truth=params.gold, extra_info=record.get("extra_info"),
            )
        except Exception as e:  # the user's code: its failure is an outcome, not a crash
            return _error(f"compute_score raised {type(e).__name__}: {e}")
        return to_verdict(value, accept_none=False)

    return call


def _trl_caller(fn: Callable) -> Callable[[str, RewardFnParams, VerifyContext], Verdict]:
    def call(completion: str, params: RewardFnParams, ctx: VerifyContext) -> Verdict:
        chat = isinstance(ctx.prompt, list)
        prompt: Any = [{"role": m.role, "content": m.content} for m in ctx.prompt] if chat else ctx.prompt
        shown: Any = [{"role": "assistant", "content": completion}] if chat else completion
        columns = {k: [v] for k, v in ctx.record.items() if k not in ("prompts", "completions", "completion_ids")}
        try:
            values = fn(prompts=[prompt], completions=[shown], completion_ids=[list(ctx.completion_ids)], **columns)
        except Exception as e:
            return _error(f"reward function raised {type(e).__name__}: {e}")
        if not isinstance(values, (list, tuple)) or len(values) != 1:
            return _error(f"reward function returned {_show(values)}, not a list of one reward per completion")
        return to_verdict(values[0], accept_none=True)

    return call


def to_verdict(value: Any, *, accept_none: bool) -> Verdict:
    """The Verdict for what a reward function returned (see the module docstring)."""
    if value is None and accept_none:
        return Verdict(0.0, "parse_error", "", detail="not applicable (the reward function returned None)")
    components: dict[str, float] = {}
    acc: Any = None
    if isinstance(value, dict):
        if "score" not in value:
            return _error(f"returned a dict without 'score': {_show(value)}")
        acc = value.get("acc")
        for key, x in value.items():
            if key != "score" and _finite(x):
                components[str(key)] = float(x)
        value = value["score"]
    if not _is_number(value):
        return _error(f"returned {_show(value)}, not a number")
    try:
        reward = float(value)
    except (TypeError, ValueError) as e:  # a tensor of many values, say
        return _error(f"returned {_show(value)}, not a number: {e}")
    if not math.isfinite(reward):
        return _error(f"returned {reward!r}, not a finite reward")
    ok = bool(acc) if acc is not None else reward > 0
    return Verdict(reward, "ok" if ok else "wrong", "", components=components)


def _error(detail: str) -> Verdict:
    return Verdict(0.0, "error", "", detail=detail[:_DETAIL_CHARS])


def _is_number(x: Any) -> bool:
    """A real number: bool, int, float, numpy and torch scalars (anything with ``__float__``), not a string."""
    return isinstance(x, numbers.Real) or (hasattr(x, "__float__") and not isinstance(x, (str, bytes, complex)))


def _finite(x: Any) -> bool:
    try:
        return _is_number(x) and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _show(x: Any) -> str:
    text = repr(x)
    return f"{text[:200]}{'...' if len(text) > 200 else ''} ({type(x).__name__})"


__all__ = ["RewardFnParams", "adapt", "kind_of", "to_verdict"]
