"""Which verifications run in the verifier's own process instead of a worker.

Every verification runs in one of the pool's killable worker processes under a
hard timeout (``rlvr.verify.pool``), except the built-ins that provably finish
in time linear in the completion (which validation bounds), cannot hang, touch
the file system or import anything. A worker round trip costs more of the
role's CPU than these take, and a group whose every verdict is known at once
takes the consumer's fast path (``VerifyActor.forward``):

- ``exact`` and ``random``: always;
- ``regex``: when its pattern is linear (``rlvr.verify.linear_regex``: one
  unbounded repeat of a single character at most, no back-references or
  look-arounds, none at all in ``search`` mode); any other pattern, even a
  harmless one, runs in a worker as before;
- ``composite``: when every part runs inline (the built-in example's
  ``exact`` plus a ``regex`` format check does).

A plug-in never runs inline: these names are built-ins, and ``register``
refuses a built-in's name. Measured on the built-in example
(``bench/role_cpu.py``): the fast path halves the verify role's CPU per sample.
"""

from __future__ import annotations

from rlvr.verify.linear_regex import is_linear
from rlvr.verify.registry import BoundVerifier

# Names that may run inline, depending on their params; any other name never does.
INLINE_CANDIDATES = frozenset({"exact", "random", "regex", "composite"})
_ALWAYS = frozenset({"exact", "random"})


def runs_inline(bound: BoundVerifier) -> bool:
    """True when ``bound`` (resolved, its params checked) may run in the caller's process."""
    name = bound.name
    if name in _ALWAYS:
        return True
    if name == "regex":
        from rlvr.verify.simple import regex_flags

        p = bound.params
        return is_linear(p.pattern, regex_flags(p), search=p.mode == "search")  # type: ignore[attr-defined]
    if name == "composite":
        from rlvr.verify.composite import bind_parts

        return all(runs_inline(part) for part in bind_parts(bound.params))  # type: ignore[arg-type]
    return False


__all__ = ["INLINE_CANDIDATES", "runs_inline"]
