"""Reward functions as users already have them: verl's and TRL's, unchanged, called as their frameworks call them.

``[verify] plugins`` (and ``rlvr-actor audit|eval --verifier``) take a
``"package.module:ATTR"`` path. Besides a ``Verifier`` object, ATTR may be a
plain function, called by one of three conventions (docs/rewards.md,
"Reward functions from verl and TRL", shows each with a peer's function):

- ``"verl"``, how verl's reward managers call ``custom_reward_function`` and
  ``default_compute_score``: keywords ``data_source`` (the record's, else the
  task's dataset name), ``solution_str`` (the completion), ``ground_truth``
  (``params.gold``: verl's ``reward_model.ground_truth``) and ``extra_info``
  (the record's). It gets the names it declares, all four with ``**kwargs``.
- ``"verl_scorer"``, how verl's ``default_compute_score`` calls each
  per-dataset scorer: positionally, ``scorer(solution_str, ground_truth)``,
  whatever the scorer names them (``math_verify.compute_score(model_output,
  ground_truth, ...)``, ``geo3k.compute_score(predict_str, ground_truth,
  ...)``); the rest keep their defaults. A tuple it returns is read as the
  dispatcher reads it: its first item is the score (``prime_math``).
- ``"trl"``, how TRL 0.29.1's ``GRPOTrainer._calculate_rewards`` calls
  reward functions, for a batch of one: keywords ``prompts=[prompt]``,
  ``completions=[completion]`` (chat: message lists, ``[{"role":
  "assistant", "content": text}]``), ``completion_ids=[ids]``, every other
  column of the record as a list of one, ``trainer_state`` (``global_step``
  is the sample's policy version), and TRL 1.x's ``log_metric(name, value)``
  (components) and ``log_extra(column, values)`` (kept in ``detail``).
  ``async def`` functions are awaited; it returns a list of one reward
  (``None``: not applicable). A column it requires that the record lacks is
  an ``error`` naming the column and the columns there are.

Which convention applies is read from the parameter names (``convention_of``):
TRL's own names (``prompts``, ``completions``, ``completion_ids``) say TRL;
``solution_str`` says verl; a second positional parameter named
``ground_truth``, with every later one optional, says a verl scorer. A
function the names do not settle (``prime_code.compute_score(completion,
test_cases)``) or that declares both verl's and TRL's is refused at load,
pointing at the explicit form, ``reward_function(fn, convention)``, which the
user writes beside the function: the convention is a fact about the function,
and a module attribute reaches every process that loads the plug-in (the
role, each pool worker, audit, eval, plan) with its path, where a config key
would have to be carried to each.

verl always passes a ground truth: a task or audit case without ``gold`` is
refused when its spec is resolved (``bad params``: dead-lettered in a run, a
``spec_error`` naming the case in ``audit``), before the scorer crashes on
``None``. What comes back is read by ``rlvr.verify.reward_values``. A function
that hangs is the pool's to stop (``verify.timeout_s``, outcome ``timeout``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, Literal, get_args

from msgspec import Struct

from rlvr.protocol.samples import Verdict
from rlvr.verify.registry import Verifier, VerifierPluginError, VerifyContext
from rlvr.verify.reward_values import error, finite, show, to_verdict

Convention = Literal["verl", "verl_scorer", "trl"]
CONVENTIONS: tuple[str, ...] = get_args(Convention)
# What each convention passes by name.
VERL_NAMES = ("data_source", "solution_str", "ground_truth", "extra_info")
TRL_NAMES = ("prompts", "completions", "completion_ids", "trainer_state", "log_metric", "log_extra")
# The names only TRL passes: declaring any one says TRL (its docs' Example 1 declares completion_ids alone).
TRL_OWN = ("prompts", "completions", "completion_ids")
# Where the accepted forms are shown; every refusal points there.
FORMS_DOC = "docs/rewards.md#reward-functions-from-verl-and-trl"


class RewardFnParams(Struct, frozen=True):
    """What a task tells a reward function besides its record (``VerifyContext.record``)."""

    # The dataset's answer: verl's ground_truth (the dataset's answer_field); None when absent.
    gold: Any = None


def _params(fn: Callable) -> dict[str, inspect.Parameter] | None:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # a builtin or C function without a signature
        return None


def _positional(params: dict[str, inspect.Parameter]) -> list[inspect.Parameter]:
    return [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _required(params: dict[str, inspect.Parameter]) -> list[inspect.Parameter]:
    return [p for p in params.values() if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _takes_kwargs(params: dict[str, inspect.Parameter]) -> bool:
    return any(p.kind is p.VAR_KEYWORD for p in params.values())


def convention_of(fn: Callable) -> Convention | None:
    """The convention ``fn``'s parameter names say it follows; None when they do not settle it."""
    params = _params(fn)
    if params is None:
        return None
    trl = any(n in params for n in TRL_OWN)
    if "solution_str" in params:
        return None if trl else "verl"
    if trl:
        return "trl"
    positional = _positional(params)
    if len(positional) >= 2 and positional[1].name == "ground_truth" and _scorer_fills(params):
        return "verl_scorer"
    return None


def _scorer_fills(params: dict[str, inspect.Parameter]) -> bool:
    """verl's dispatcher passes two positional values: every required parameter must be one of them."""
    first_two = {p.name for p in _positional(params)[:2]}
    return all(p.name in first_two for p in _required(params))


def adapt(obj: Any, path: str) -> Verifier:
    """``obj`` (what ``path`` names) as a ``Verifier``; ``VerifierPluginError`` when it is none of the forms."""
    if isinstance(obj, Verifier):
        return obj
    if not callable(obj):
        raise VerifierPluginError(f"plug-in {path!r} is a {type(obj).__name__}, neither a Verifier object nor a "
                                  f"reward function ({FORMS_DOC} shows the forms)")
    convention = convention_of(obj)
    if convention is None:
        raise VerifierPluginError(_unsettled(obj, path))
    return reward_function(obj, convention, name=path)


def _unsettled(fn: Callable, path: str) -> str:
    params = _params(fn)
    shown = ", ".join(params or ()) or "no readable parameters"
    head = f"plug-in {path!r} takes ({shown}): "
    if params and "solution_str" in params and any(n in params for n in TRL_OWN):
        why = "it declares both verl's solution_str and TRL's names, so its names do not say how to call it"
    else:
        why = ("a reward function is bound by its parameter names, and these name no convention: verl's "
               "solution_str (compute_score(data_source, solution_str, ground_truth, extra_info)), a verl "
               "scorer's positional (answer, ground_truth, ...) or TRL's prompts/completions/completion_ids "
               "(reward_func(completions, **kwargs))")
    return (f"{head}{why}. Say which in your module with rlvr.verify.reward_fns.reward_function(fn, "
            f"{' | '.join(map(repr, CONVENTIONS))}) and list that attribute instead; {FORMS_DOC} shows each form")


def reward_function(fn: Callable, convention: Convention, name: str = "") -> Verifier:
    """``fn`` as a ``Verifier`` called the way ``convention`` says: the explicit form, for a function whose
    names do not settle it (``PRIME_CODE = reward_function(prime_code.compute_score, "verl_scorer")``)."""
    label = name or getattr(fn, "__name__", "") or type(fn).__name__
    if convention not in CONVENTIONS:
        raise VerifierPluginError(f"reward function {label!r}: convention {convention!r} is not one of "
                                  f"{', '.join(CONVENTIONS)} ({FORMS_DOC})")
    params = _params(fn)
    if params is None:
        raise VerifierPluginError(f"reward function {label!r} has no readable signature to bind ({FORMS_DOC})")
    _check_fillable(params, convention, label)
    callers = {"verl": _verl_caller, "verl_scorer": _scorer_caller, "trl": _trl_caller}
    takes_gold = convention == "verl_scorer" or (convention == "verl" and (
        "ground_truth" in params or _takes_kwargs(params)))
    return Verifier(label, RewardFnParams, callers[convention](fn), check=_gold_given if takes_gold else None)


def _check_fillable(params: dict[str, inspect.Parameter], convention: str, label: str) -> None:
    """A required parameter that no call can ever fill: said at start-up, not at every sample."""
    if convention == "verl":
        missing = [p.name for p in _required(params) if p.name not in VERL_NAMES or p.kind is p.POSITIONAL_ONLY]
        known = ", ".join(VERL_NAMES)
    elif convention == "verl_scorer":
        takes_args = any(p.kind is p.VAR_POSITIONAL for p in params.values())
        if len(_positional(params)) < 2 and not takes_args:
            raise VerifierPluginError(f"reward function {label!r} (verl_scorer convention) is called as "
                                      f"scorer(solution_str, ground_truth), and takes fewer than two positional "
                                      f"arguments ({FORMS_DOC})")
        first_two = {p.name for p in _positional(params)[:2]}
        missing = [p.name for p in _required(params) if p.name not in first_two]
        known = "the first two positional parameters (solution_str, ground_truth)"
    else:  # TRL: any other required name is a dataset column, looked up per sample; none is positional-only
        missing = [p.name for p in _required(params) if p.kind is p.POSITIONAL_ONLY]
        known = "keyword arguments (TRL calls with keywords only)"
    if missing:
        raise VerifierPluginError(
            f"reward function {label!r} ({convention} convention) requires {', '.join(map(repr, missing))}, "
            f"which nothing passes; it is given {known} (and **kwargs); {FORMS_DOC}"
        )


def _gold_given(params: RewardFnParams) -> None:
    if params.gold is None:
        raise ValueError("no 'gold': verl always passes the dataset's answer as ground_truth, and this task "
                         "(in audit: this case) gives none; give it one (audit: a 'gold' per case; a dataset: "
                         "its answer field)")


def _bind(fn: Callable, available: dict[str, Any]) -> dict[str, Any]:
    """The keywords ``fn`` declares out of ``available``; all of them when it takes ``**kwargs``."""
    params = _params(fn) or {}
    if _takes_kwargs(params):
        return available
    return {k: v for k, v in available.items() if k in params}


def _call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):  # TRL and verl's reward loop await async functions; one worker runs one
        value = asyncio.run(_awaited(value))
    return value


async def _awaited(value: Any) -> Any:
    return await value


def _raised(fn: Callable, e: Exception) -> str:
    return f"{getattr(fn, '__name__', 'the reward function')} raised {type(e).__name__}: {e}"


def _verl_caller(fn: Callable) -> Callable[[str, RewardFnParams, VerifyContext], Verdict]:
    def call(completion: str, params: RewardFnParams, ctx: VerifyContext) -> Verdict:
        record = ctx.record
        available = {"data_source": record.get("data_source", ctx.dataset), "solution_str": completion,
                     "ground_truth": params.gold, "extra_info": record.get("extra_info")}
        try:
            value = _call(fn, **_bind(fn, available))
        except Exception as e:  # the user's code: its failure is an outcome, not a crash
            return error(_raised(fn, e))
        return to_verdict(value, accept_none=False)

    return call


def _scorer_caller(fn: Callable) -> Callable[[str, RewardFnParams, VerifyContext], Verdict]:
    def call(completion: str, params: RewardFnParams, ctx: VerifyContext) -> Verdict:
        try:
            value = _call(fn, completion, params.gold)
        except Exception as e:
            return error(_raised(fn, e))
        if isinstance(value, (tuple, list)):  # default_compute_score: float(res[0])
            if not value:
                return error(f"returned {show(value)}: verl's dispatcher reads the first item as the score")
            value = value[0]
        return to_verdict(value, accept_none=False)

    return call


def _trl_caller(fn: Callable) -> Callable[[str, RewardFnParams, VerifyContext], Verdict]:
    params = _params(fn) or {}
    # Required names TRL does not pass itself: dataset columns, looked up in the record.
    columns_needed = [p.name for p in _required(params) if p.name not in TRL_NAMES]
    reads_ids = "completion_ids" in params

    def call(completion: str, params: RewardFnParams, ctx: VerifyContext) -> Verdict:
        chat = isinstance(ctx.prompt, list)
        prompt: Any = [{"role": m.role, "content": m.content} for m in ctx.prompt] if chat else ctx.prompt
        shown: Any = [{"role": "assistant", "content": completion}] if chat else completion
        record = ctx.record
        absent = [n for n in columns_needed if n not in record]
        if absent:
            has = ", ".join(record) if record else "none: no column reached it (the case or task carries no record)"
            return error(f"the reward function requires column(s) {', '.join(map(repr, absent))}, which the "
                         f"record lacks; its columns: {has}")
        if reads_ids and completion and not ctx.completion_ids:
            # A run always has the ids of its text; only an audit case can lack them: never score that as 0.
            return error("the reward function reads completion_ids, and none reached it (in audit, give each "
                         "case its 'completion_ids')")
        metrics: dict[str, float] = {}
        extras: dict[str, Any] = {}

        def log_metric(name: str, value: float) -> None:
            if finite(value):
                metrics[str(name)] = float(value)

        def log_extra(column: str, values: list) -> None:
            extras[str(column)] = values[0] if isinstance(values, (list, tuple)) and len(values) == 1 else values

        available: dict[str, Any] = {k: [v] for k, v in record.items() if k not in TRL_NAMES}
        available.update(prompts=[prompt], completions=[shown], completion_ids=[list(ctx.completion_ids)],
                         trainer_state=SimpleNamespace(global_step=_policy_version(ctx)),
                         log_metric=log_metric, log_extra=log_extra)
        try:
            values = _call(fn, **_bind(fn, available))
        except Exception as e:
            return error(_raised(fn, e) + _columns_hint(record))
        if not isinstance(values, (list, tuple)) or len(values) != 1:
            return error(f"reward function returned {show(values)}, not a list of one reward per completion")
        verdict = to_verdict(values[0], accept_none=True, notes=extras)
        if metrics and verdict.outcome in ("ok", "wrong"):
            verdict = Verdict(verdict.reward, verdict.outcome, verdict.verifier, components={
                **metrics, **verdict.components}, extracted=verdict.extracted, detail=verdict.detail)
        return verdict

    return call


def _policy_version(ctx: VerifyContext) -> int:
    return 0 if ctx.episode is None or not ctx.episode.turns else ctx.episode.turns[0].policy_version


def _columns_hint(record: dict[str, Any]) -> str:
    if not record:
        return " (no dataset column reached it: the case or task carries no record)"
    return f" (columns it got: {', '.join(record)})"


__all__ = ["CONVENTIONS", "FORMS_DOC", "TRL_NAMES", "VERL_NAMES", "Convention", "RewardFnParams", "adapt",
           "convention_of", "reward_function"]
