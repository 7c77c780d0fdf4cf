"""The verifier registry: a name in a task's ``VerifierSpec`` -> a typed, pure function.

A verifier is a ``Verifier``: a name, a msgspec params Struct and a pure
synchronous function ``fn(completion, params, ctx) -> Verdict``. ``resolve``
turns a wire ``VerifierSpec`` into a ``BoundVerifier`` (typed params, checked
once) or raises ``VerifierSpecError`` naming the unknown verifier or the bad
parameter; the actor dead-letters the message with that reason.

Names are looked up in two places, in order:
- verifiers registered in this process: with ``register`` (tests), or as
  plug-ins by ``load_plugins`` (the ``[verify] plugins`` list, imported once
  at start-up, in the actor and in each pool worker);
- the built-ins (exact, regex, format, composite, math, code, reasoning_gym, env,
  arith_steps, math_steps, random, llm_judge, hybrid, rlpr),
  imported lazily so that resolving ``exact`` never imports sympy.

A message never makes this process import anything: a name that is neither
(``"unittest.__main__:x"``, a module planted in the working directory) is a
``VerifierSpecError``, and the actor dead-letters the message with its reason.
A plug-in is a ``Verifier`` object, or a reward function called as verl or TRL
calls it (``rlvr.verify.reward_fns`` binds it); a config cannot name any
other callable.

This module does not run anything in another process or under a timeout:
that is ``rlvr.verify.pool``. Calling a ``BoundVerifier`` runs it right here.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec
from msgspec import Struct

from rlvr.actors.plugins import PluginImportError, import_attr
from rlvr.protocol.samples import Episode, Sample, Verdict
from rlvr.protocol.tasks import ChatMessage, VerifierSpec
from rlvr.sandbox.config import SandboxConfig

P = TypeVar("P", bound=Struct)


class VerifierSpecError(ValueError):
    """A spec that names no known verifier or carries bad parameters.

    Its message is the dead letter's reason, e.g. ``unknown verifier 'mth'
    (known: code, composite, exact, format, math, regex)``.
    """


class VerifierPluginError(ValueError):
    """A ``[verify] plugins`` entry that cannot be imported or is not a ``Verifier``
    (a deployment fault: the replica stops at start with this message)."""


class VerifierUnavailableError(RuntimeError):
    """A built-in verifier whose module cannot be imported on this machine
    (a deployment fault, not a bad task: the message should be retried)."""


class VerifyContext(Struct, frozen=True, omit_defaults=True):
    """What a verifier may know besides the completion text and its params."""

    # Tokens the policy generated in the completion (overlong shaping counts these, not characters;
    # an episode's environment tokens are not counted).
    completion_tokens: int | None = None
    # Why generation stopped: "stop", "length", "abort" or "rejected".
    finish_reason: str | None = None
    # The sampling max_tokens the completion was generated under.
    max_tokens: int | None = None
    # Sandbox for code verifiers (backend, docker image, limits) from VerifyConfig.
    sandbox: SandboxConfig = SandboxConfig()
    # Wall-clock seconds the pool allows this verification (set by the pool),
    # so a verifier with its own deadlines (the code sandbox) can stay inside it.
    budget_s: float | None = None
    # The task's prompt: its text, or its chat messages.
    prompt: str | list[ChatMessage] | None = None
    # The dataset record's other fields (verl's data_source, extra_info; TRL's columns).
    record: dict[str, Any] = {}
    # The dataset the task came from (its name or file stem).
    dataset: str = ""
    # The completion's token ids (TRL's completion_ids).
    completion_ids: list[int] = []
    # A multi-turn episode's turns, end reason, environment rewards and transcript (None: one turn).
    episode: Episode | None = None
    # The sample's id ("<task_id>/<index>"): stable across redeliveries (the random control seeds on it).
    sample_id: str = ""
    # What the rollout measured for this sample (RLPR's reference-answer probability: rlpr_*).
    measures: dict[str, float] = {}


def context_for_sample(sample: Sample, sandbox: SandboxConfig | None = None) -> VerifyContext:
    """The context of one generated sample."""
    return VerifyContext(
        completion_tokens=sample.completion.policy_tokens(),  # the policy's, not an environment's
        finish_reason=sample.finish_reason,
        max_tokens=sample.sampling.max_tokens,
        sandbox=sandbox if sandbox is not None else SandboxConfig(),
        prompt=sample.prompt,
        record=sample.record,
        dataset=sample.dataset,
        completion_ids=sample.completion.ids,
        episode=sample.episode,
        sample_id=sample.sample_id,
        measures=sample.measures,
    )


@dataclass(frozen=True)
class Verifier(Generic[P]):
    """A named, typed verification function.

    ``check`` runs at resolve time for constraints a Struct cannot state
    (a regex that compiles, composite parts that resolve); it raises
    ``ValueError`` with the reason. ``warmup`` is called once in each worker
    process at start so the first real verification pays no import.
    """

    name: str
    params: type[P]
    fn: Callable[[str, P, VerifyContext], Verdict]
    check: Callable[[P], None] | None = None
    warmup: Callable[[], None] | None = None


@dataclass(frozen=True)
class BoundVerifier:
    """A verifier with converted, checked parameters, ready to call."""

    name: str  # the name as the spec gave it; every Verdict carries it
    verifier: Verifier
    params: Struct
    raw_params: dict[str, Any]

    @property
    def spec(self) -> VerifierSpec:
        return VerifierSpec(name=self.name, params=self.raw_params)

    def __call__(self, completion: str, ctx: VerifyContext | None = None) -> Verdict:
        """Run the verifier in this process (the pool's workers call this)."""
        verdict = self.verifier.fn(completion, self.params, ctx or VerifyContext())
        if verdict.verifier != self.name:
            verdict = msgspec.structs.replace(verdict, verifier=self.name)
        return verdict


_registered: dict[str, Verifier] = {}
_loaded: dict[str, Verifier] = {}
_plugins: dict[str, Verifier] = {}  # "package.module:ATTR" -> Verifier, from load_plugins


def _load_exact() -> Verifier:
    from rlvr.verify.simple import EXACT

    return EXACT


def _load_regex() -> Verifier:
    from rlvr.verify.simple import REGEX

    return REGEX


def _load_format() -> Verifier:
    from rlvr.verify.format import FORMAT

    return FORMAT


def _load_composite() -> Verifier:
    from rlvr.verify.composite import COMPOSITE

    return COMPOSITE


def _load_math() -> Verifier:
    from rlvr.verify.math import MathParams, score_math

    def fn(completion: str, params: MathParams, ctx: VerifyContext) -> Verdict:
        return score_math(completion, params)

    def warmup() -> None:
        # Imports sympy / the LaTeX parser and fills their caches.
        score_math("so the answer is \\boxed{\\frac{1}{2}}", MathParams(gold="0.5"))

    return Verifier("math", MathParams, fn, warmup=warmup)


_sandboxes: dict[tuple, Any] = {}  # one sandbox per worker process and setting


def _load_code() -> Verifier:
    from rlvr.verify.code import CodeParams, score_code
    from rlvr.sandbox import SandboxLimits
    from rlvr.sandbox.levels import sandbox_from_config

    def fn(completion: str, params: CodeParams, ctx: VerifyContext) -> Verdict:
        box = ctx.sandbox
        key = (box.level, box.allow_unsandboxed, box.docker_image, box.work_mb, box.tmp_mb)
        if key not in _sandboxes:  # built once per worker process, reused across calls
            _sandboxes[key] = sandbox_from_config(box)
            atexit.register(_sandboxes[key].close)  # a worker told to stop exits cleanly
        limits = msgspec.convert(msgspec.to_builtins(box.limits), SandboxLimits)
        return score_code(completion, params, _sandboxes[key], limits)

    return Verifier("code", CodeParams, fn)


def _load_env() -> Verifier:
    from rlvr.verify.env_reward import ENV

    return ENV


def _load_arith_steps() -> Verifier:
    from rlvr.verify.steps import ARITH_STEPS

    return ARITH_STEPS


def _load_math_steps() -> Verifier:
    from rlvr.verify.steps import MATH_STEPS

    return MATH_STEPS


def _load_llm_judge() -> Verifier:
    from rlvr.verify.judge import LLM_JUDGE

    return LLM_JUDGE


def _load_hybrid() -> Verifier:
    from rlvr.verify.judge import HYBRID

    return HYBRID


def _load_rlpr() -> Verifier:
    from rlvr.verify.rlpr import RLPR

    return RLPR


def _load_random() -> Verifier:
    from rlvr.verify.random_reward import RANDOM

    return RANDOM


def _load_reasoning_gym() -> Verifier:
    from rlvr.verify.rgym import REASONING_GYM

    return REASONING_GYM


_BUILTINS: dict[str, Callable[[], Verifier]] = {
    "arith_steps": _load_arith_steps,
    "code": _load_code,
    "composite": _load_composite,
    "env": _load_env,
    "exact": _load_exact,
    "format": _load_format,
    "hybrid": _load_hybrid,
    "llm_judge": _load_llm_judge,
    "math": _load_math,
    "math_steps": _load_math_steps,
    "random": _load_random,
    "reasoning_gym": _load_reasoning_gym,
    "regex": _load_regex,
    "rlpr": _load_rlpr,
}


def register(verifier: Verifier) -> Verifier:
    """Register ``verifier`` in this process under ``verifier.name``.

    It is visible to this process only: a worker process finds it only if the
    registering module is imported there; plug-ins named by import path
    reach the workers through ``load_plugins`` (``VerifierPool(plugins=...)``).
    """
    if verifier.name in _BUILTINS or ":" in verifier.name:
        raise ValueError(f"verifier name {verifier.name!r} is reserved")
    _registered[verifier.name] = verifier
    return verifier


def load_plugins(paths: tuple[str, ...] | list[str]) -> list[Verifier]:
    """Import each ``"package.module:ATTR"`` now and make it a name specs may use.

    Called at start-up with the verify role's own config, never with a name
    taken from a message. Raises ``VerifierPluginError`` naming the entry.
    """
    out = []
    for path in paths:
        if path not in _plugins:
            _plugins[path] = _import_verifier(path)
        out.append(_plugins[path])
    return out


def import_paths(spec: VerifierSpec) -> list[str]:
    """The ``"package.module:ATTR"`` names ``spec`` uses (its own, a composite's parts').

    For commands whose operator names a verifier on the command line or in a
    data file (``audit``, ``eval``): they may load these as plug-ins. A role
    never calls this on a message: its plug-ins come from its own config."""
    names = [spec.name]
    parts = spec.params.get("parts") if spec.name == "composite" else None
    if isinstance(parts, list):
        names += [p.get("name") for p in parts if isinstance(p, dict)]
    return sorted({n for n in names if isinstance(n, str) and ":" in n})


def plugins() -> list[str]:
    """The plug-ins loaded in this process (a pool forwards them to its workers)."""
    return sorted(_plugins)


def known() -> list[str]:
    """Names a spec may use."""
    return sorted({*_BUILTINS, *_registered, *_plugins})


def get(name: str) -> Verifier:
    """The verifier called ``name``; raises ``VerifierSpecError`` if there is none.

    Never imports a module the name points at: import paths work only once
    ``load_plugins`` has loaded them from the role's own config.
    """
    if name in _registered:
        return _registered[name]
    if name in _plugins:
        return _plugins[name]
    if name in _loaded:
        return _loaded[name]
    if name in _BUILTINS:
        try:
            verifier = _BUILTINS[name]()
        except ImportError as e:
            raise VerifierUnavailableError(f"verifier {name!r} is unavailable here: {e}") from e
    elif ":" in name:
        raise VerifierSpecError(
            f"unknown verifier {name!r}: a message cannot make the verifier import code; "
            f"list it in [verify] plugins to allow it (known: {', '.join(known())})"
        )
    else:
        raise VerifierSpecError(f"unknown verifier {name!r} (known: {', '.join(known())})")
    _loaded[name] = verifier
    return verifier


def _import_verifier(path: str) -> Verifier:
    try:
        obj = import_attr(path)
    except PluginImportError as e:
        raise VerifierPluginError(f"plug-in {e}") from None
    from rlvr.verify.reward_fns import adapt  # verl's and TRL's functions become Verifiers

    return adapt(obj, path)


def resolve(spec: VerifierSpec) -> BoundVerifier:
    """Bind ``spec`` to its verifier with typed, checked parameters.

    Raises ``VerifierSpecError`` (a ValueError) whose message names the
    unknown verifier or the bad parameter, and ``VerifierUnavailableError``
    when a built-in's module is missing on this machine.
    """
    verifier = get(spec.name)
    try:
        params = msgspec.convert(spec.params, verifier.params)
    except msgspec.ValidationError as e:
        raise VerifierSpecError(f"bad params for {spec.name!r}: {e}") from None
    if verifier.check is not None:
        try:
            verifier.check(params)
        except ValueError as e:
            raise VerifierSpecError(f"bad params for {spec.name!r}: {e}") from None
    return BoundVerifier(name=spec.name, verifier=verifier, params=params, raw_params=dict(spec.params))


def warm_up(names: tuple[str, ...] | list[str]) -> list[str]:
    """Load and warm the named verifiers in this process; returns the
    problems met (a missing module is reported, not raised)."""
    problems = []
    for name in names:
        try:
            verifier = get(name)
            if verifier.warmup is not None:
                verifier.warmup()
        except Exception as e:  # noqa: BLE001 - warm-up is best effort, reported
            problems.append(f"warm-up of {name!r} failed: {type(e).__name__}: {e}")
    return problems


__all__ = [
    "BoundVerifier",
    "Verifier",
    "VerifierPluginError",
    "VerifierSpecError",
    "VerifierUnavailableError",
    "VerifyContext",
    "context_for_sample",
    "get",
    "import_paths",
    "known",
    "load_plugins",
    "plugins",
    "register",
    "resolve",
    "warm_up",
]
