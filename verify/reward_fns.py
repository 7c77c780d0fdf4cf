"""Reward functions as users already have them: verl's scorers and TRL's reward functions, unchanged.

``[verify] plugins`` (and ``rlvr-actor audit|eval --verifier``) take a
``"package.module:ATTR"`` path. Besides a ``Verifier`` object, ATTR may be a
plain function. It is bound by its parameter names, as pytest binds fixtures:
it gets what it declares, and everything it may read when it takes
``**kwargs``. A required parameter nothing can fill is an error at start-up
that names it (``adapt``). Which convention a function follows is read from
its names too:

- **verl** (it declares ``solution_str``): called once per completion with
  keywords, as verl calls it. ``solution_str`` is the completion,
  ``ground_truth`` the dataset's answer (``params.gold``: verl's
  ``reward_model.ground_truth``), ``data_source`` the record's
  ``data_source`` (else the task's dataset name), ``extra_info`` the record's
  ``extra_info``. So verl's dispatcher ``default_compute_score(data_source,
  solution_str, ground_truth, extra_info=None, ...)`` and its per-dataset
  scorers (``gsm8k.compute_score(solution_str, ground_truth, method="strict",
  ...)``) both work; their other parameters keep their defaults. It returns
  a number or a dict whose ``"score"`` is the reward.
- **TRL** (it declares ``completions``): called as ``GRPOTrainer`` calls it,
  for a batch of one: ``prompts=[prompt]``, ``completions=[completion]`` (for
  a chat prompt both are message lists: ``[{"role": "assistant", "content":
  text}]``), ``completion_ids=[ids]``, every other column of the record as a
  list of one value, ``trainer_state`` (``global_step`` is the sample's
  policy version), and ``log_metric(name, value)`` (its values become the
  verdict's components) and ``log_extra(column, values)`` (accepted, not
  kept). ``async def`` functions are awaited. It returns a list of one reward;
  ``None`` means "not applicable". A column it requires that the record lacks
  is an ``error`` outcome that names the column and the columns there are.

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

import asyncio
import inspect
import math
import numbers
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from msgspec import Struct

from rlvr.protocol.samples import Verdict
from rlvr.verify.registry import Verifier, VerifierPluginError, VerifyContext

# What each convention can pass, by name.
VERL_NAMES = ("data_source", "solution_str", "ground_truth", "extra_info")
TRL_NAMES = ("prompts", "completions", "completion_ids", "trainer_state", "log_metric", "log_extra")
_DETAIL_CHARS = 2000


class RewardFnParams(Struct, frozen=True):
    """What a task tells a reward function besides its record (``VerifyContext.record``)."""

    # The dataset's answer: verl's ground_truth (the dataset's answer_field); None when absent.
    gold: Any = None


def _params(fn: Callable) -> dict[str, inspect.Parameter] | None:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # a builtin or C function without a signature
        return None


def kind_of(fn: Callable) -> str | None:
    """"verl" or "trl" when ``fn``'s parameter names say which convention it follows, else None."""
    params = _params(fn)
    if params is None:
        return None
    if "solution_str" in params:
        return "verl"
    if "completions" in params:
        return "trl"
    return None


def adapt(obj: Any, path: str) -> Verifier:
    """``obj`` (what ``path`` names) as a ``Verifier``; ``VerifierPluginError`` when it is none of the three."""
    if isinstance(obj, Verifier):
        return obj
    if callable(obj):
        kind = kind_of(obj)
        if kind == "verl":
            _check_required(obj, path, VERL_NAMES, "verl")
            return Verifier(path, RewardFnParams, _verl_caller(obj))
        if kind == "trl":
            return Verifier(path, RewardFnParams, _trl_caller(obj))
        shown = ", ".join(_params(obj) or ()) or "no readable parameters"
        raise VerifierPluginError(
            f"plug-in {path!r} takes ({shown}): a reward function is bound by its parameter names, and it "
            "declares neither 'solution_str' (verl: compute_score(solution_str, ground_truth, data_source=..., "
            "extra_info=...)) nor 'completions' (TRL: reward_func(completions, **kwargs), with prompts, "
            "completion_ids and dataset columns as further names); docs/rewards.md shows both"
        )
    raise VerifierPluginError(
        f"plug-in {path!r} is a {type(obj).__name__}, neither a Verifier object nor a reward function with "
        "verl's names (solution_str, ground_truth, ...) or TRL's (completions, **kwargs)"
    )


def _check_required(fn: Callable, path: str, known: tuple[str, ...], kind: str) -> None:
    """A required parameter that no value can ever fill: said at start-up, not at every sample."""
    params = _params(fn) or {}
    missing = [n for n, p in params.items() if p.default is p.empty
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n not in known]
    if missing:
        raise VerifierPluginError(
            f"plug-in {path!r} ({kind} convention) requires {', '.join(map(repr, missing))}, which nothing "
            f"passes; it may declare any of {', '.join(known)} (and **kwargs)"
        )


def _bind(fn: Callable, available: dict[str, Any]) -> dict[str, Any]:
    """The keywords ``fn`` declares out of ``available``; all of them when it takes ``**kwargs``."""
    params = _params(fn) or {}
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return available
    return {k: v for k, v in available.items() if k in params}


def _call(fn: Callable, kwargs: dict[str, Any]) -> Any:
    value = fn(**kwargs)
    if inspect.isawaitable(value):  # TRL awaits async reward functions; here one worker runs one
        value = asyncio.run(_awaited(value))
    return value


async def _awaited(value: Any) -> Any:
    return await value


def _verl_caller(fn: Callable) -> Callable[[str, RewardFnParams, VerifyContext], Verdict]:
    def call(completion: str, params: RewardFnParams, ctx: VerifyContext) -> Verdict:
        record = ctx.record
        available = {"data_source": record.get("data_source", ctx.dataset), "solution_str": completion,
                     "ground_truth": params.gold, "extra_info": record.get("extra_info")}
        try:
            value = _call(fn, _bind(fn, available))
        except Exception as e:  # the user's code: its failure is an outcome, not a crash
            return _error(f"{getattr(fn, '__name__', 'compute_score')} raised {type(e).__name__}: {e}")
        return to_verdict(value, accept_none=False)

    return call


def _trl_caller(fn: Callable) -> Callable[[str, RewardFnParams, VerifyContext], Verdict]:
    params = _params(fn) or {}
    # Required names TRL does not pass itself: dataset columns, looked up in the record.
    columns_needed = [n for n, p in params.items() if p.default is p.empty and n not in TRL_NAMES
                      and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]

    def call(completion: str, params: RewardFnParams, ctx: VerifyContext) -> Verdict:
        chat = isinstance(ctx.prompt, list)
        prompt: Any = [{"role": m.role, "content": m.content} for m in ctx.prompt] if chat else ctx.prompt
        shown: Any = [{"role": "assistant", "content": completion}] if chat else completion
        record = ctx.record
        absent = [n for n in columns_needed if n not in record]
        if absent:
            has = ", ".join(record) if record else "none: no column reached it (the case or task carries no record)"
            return _error(f"the reward function requires column(s) {', '.join(map(repr, absent))}, which the "
                          f"record lacks; its columns: {has}")
        metrics: dict[str, float] = {}

        def log_metric(name: str, value: float) -> None:
            if _finite(value):
                metrics[str(name)] = float(value)

        available: dict[str, Any] = {k: [v] for k, v in record.items() if k not in TRL_NAMES}
        available.update(prompts=[prompt], completions=[shown], completion_ids=[list(ctx.completion_ids)],
                         trainer_state=SimpleNamespace(global_step=_policy_version(ctx)),
                         log_metric=log_metric, log_extra=lambda column, values: None)
        try:
            values = _call(fn, _bind(fn, available))
        except Exception as e:
            return _error(f"reward function {getattr(fn, '__name__', '')} raised {type(e).__name__}: {e}"
                          + _columns_hint(record))
        if not isinstance(values, (list, tuple)) or len(values) != 1:
            return _error(f"reward function returned {_show(values)}, not a list of one reward per completion")
        verdict = to_verdict(values[0], accept_none=True)
        if metrics and verdict.outcome in ("ok", "wrong"):
            verdict = Verdict(verdict.reward, verdict.outcome, verdict.verifier,
                              components={**metrics, **verdict.components})
        return verdict

    return call


def _policy_version(ctx: VerifyContext) -> int:
    return 0 if ctx.episode is None or not ctx.episode.turns else ctx.episode.turns[0].policy_version


def _columns_hint(record: dict[str, Any]) -> str:
    if not record:
        return " (no dataset column reached it: the case or task carries no record)"
    return f" (columns it got: {', '.join(record)})"


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


__all__ = ["TRL_NAMES", "VERL_NAMES", "RewardFnParams", "adapt", "kind_of", "to_verdict"]
