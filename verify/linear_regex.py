"""Whether Python's backtracking ``re`` matches a pattern in time linear in the text.

The ``regex`` verifier may run in the verifier's own process, beside ``exact``,
instead of in a killable worker (``rlvr.verify.inline``), only when a pattern
provably cannot backtrack catastrophically. This module decides that from the
pattern's parse tree (CPython's own parser, ``re._parser``) and says no to
anything it cannot bound:

- **no back-references, conditionals or look-arounds** (they can hide repeats
  and tie the cost to what a group captured);
- **at most one unbounded repeat** (``*``, ``+``, ``{n,}``), and its body a
  single character (a literal, a class such as ``[0-9]`` or ``\\d``, or ``.``):
  the matcher can only choose how many characters it takes, n choices in all;
- **a bounded number of ways everywhere else**: alternatives add up, a
  sequence multiplies, ``x{a,b}`` counts every choice of its repetitions; the
  product must stay within ``MAX_WAYS``, and a bounded repeat of more than one
  may not hold the unbounded repeat (``(\\d+){2}`` is two of them);
- in ``search`` mode, **no unbounded repeat at all**: every start position
  would re-scan the text it can take, n² in all.

So a linear pattern costs at most ``MAX_WAYS`` × its own length × the text's length
steps: ``^-?[0-9]+$`` (the built-in example's format check) qualifies;
``(a+)+$``, ``(a|a)*b``, ``\\d+\\d+$`` and a ``search`` for ``\\d+x`` do not, and
run in a worker under the pool's hard timeout as before. The decision is cached
per pattern, flags and mode.
"""

from __future__ import annotations

import functools

MAX_WAYS = 1024
_SINGLE_CHAR = ("LITERAL", "NOT_LITERAL", "IN", "ANY")
_LEAVES = ("LITERAL", "NOT_LITERAL", "IN", "ANY", "AT")


class _NotLinear(Exception):
    """The pattern has a construct whose cost this module does not bound."""


@functools.lru_cache(maxsize=256)
def is_linear(pattern: str, flags: int = 0, search: bool = False) -> bool:
    """True when ``re`` matches ``pattern`` (``fullmatch``, or ``search`` when ``search``)
    in time linear in the text; False when it may not, or cannot be told (an invalid
    pattern, a Python without ``re._parser``)."""
    try:
        from re import _constants as c
        from re import _parser
    except ImportError:  # pragma: no cover - CPython < 3.11: every pattern goes to a worker
        return False
    try:
        tree = _parser.parse(pattern, flags)
        ways, unbounded = _ways(tree, c)
    except Exception:  # noqa: BLE001 - _NotLinear, or anything unexpected: not proven linear
        return False
    return ways <= MAX_WAYS and unbounded <= (0 if search else 1)


def _ways(seq, c) -> tuple[int, int]:
    """(the ways a sequence can match, bounded by counting, and its unbounded repeats)."""
    ways, unbounded = 1, 0
    for op, av in seq:
        w, u = _item(op, av, c)
        ways *= w
        unbounded += u
        if ways > MAX_WAYS:
            raise _NotLinear
    return ways, unbounded


def _item(op, av, c) -> tuple[int, int]:
    name = str(op)
    if name in _LEAVES:
        return 1, 0
    if op is c.SUBPATTERN:  # (group, add_flags, del_flags, body)
        return _ways(av[3], c)
    if op is c.BRANCH:  # (None, [alternatives])
        results = [_ways(alt, c) for alt in av[1]]
        return sum(w for w, _ in results), sum(u for _, u in results)
    if op in (c.MAX_REPEAT, c.MIN_REPEAT):  # (min, max, body)
        lo, hi, body = av
        if hi == c.MAXREPEAT:
            if len(body) != 1 or str(body[0][0]) not in _SINGLE_CHAR:
                raise _NotLinear
            return 1, 1
        if hi > MAX_WAYS:
            raise _NotLinear
        w, u = _ways(body, c)
        if u and hi > 1:
            raise _NotLinear
        return sum(w**k for k in range(lo, hi + 1)), u
    raise _NotLinear  # GROUPREF, GROUPREF_EXISTS, ASSERT, ASSERT_NOT, ATOMIC_GROUP, POSSESSIVE_REPEAT, ...


__all__ = ["MAX_WAYS", "is_linear"]
