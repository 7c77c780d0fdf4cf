"""The string verifiers: ``exact`` (normalised string match) and ``regex``.

Both are for tasks whose answer is a fixed string or a pattern (labels,
multiple-choice letters, keywords, the built-in arithmetic example). Numbers
and LaTeX belong to ``math``; programs to ``code``. Reward is 1 or 0 with
outcome ``ok`` / ``wrong``; an answer that cannot be found (the marker is
absent) is ``parse_error`` with reward 0.

A pathological pattern (catastrophic backtracking) is not guarded against
here: a ``regex`` runs in the verifier's own process only when its pattern is
proven linear (``rlvr.verify.inline``, ``rlvr.verify.linear_regex``); any other
runs in the pool's killable workers under a hard timeout.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from msgspec import Meta, Struct

from rlvr.protocol.samples import Verdict
from rlvr.verify.registry import Verifier, VerifyContext

_WS = re.compile(r"\s+")


class ExactParams(Struct, frozen=True, forbid_unknown_fields=True):
    # The right answer, or several acceptable ones.
    gold: str | list[str]
    # Compare only what follows the last occurrence of this marker (e.g. "####",
    # "The answer is"); None compares the whole completion.
    after: str | None = None
    # With `after`: keep only the first non-empty line after the marker.
    first_line: bool = True
    # Cut the answer at the first occurrence of this marker (e.g. "</answer>").
    before: str | None = None
    # Strip leading/trailing whitespace, and these extra characters (e.g. ".").
    strip: bool = True
    strip_chars: str = ""
    # Compare case-insensitively (casefold).
    ignore_case: bool = True
    # Collapse runs of whitespace into one space.
    collapse_whitespace: bool = True


def _normalise(text: str, p: ExactParams) -> str:
    if p.collapse_whitespace:
        text = _WS.sub(" ", text)
    if p.strip:
        text = text.strip()
        if p.strip_chars:
            text = text.strip(p.strip_chars).strip()
    if p.ignore_case:
        text = text.casefold()
    return text


def extract_after(text: str, marker: str, first_line: bool) -> str | None:
    """The text after the last ``marker`` (its first non-empty line if asked), or None."""
    at = text.rfind(marker)
    if at < 0:
        return None
    rest = text[at + len(marker) :]
    if first_line:
        lines = [line for line in rest.splitlines() if line.strip()]
        rest = lines[0] if lines else ""
    return rest


def score_exact(completion: str, p: ExactParams, ctx: VerifyContext) -> Verdict:
    answer = completion
    if p.after is not None:
        found = extract_after(completion, p.after, p.first_line)
        if found is None:
            return Verdict(0.0, "parse_error", "exact", detail=f"marker {p.after!r} not found")
        answer = found
    if p.before:
        answer = answer.split(p.before, 1)[0]
    extracted = _normalise(answer, p)
    golds = [p.gold] if isinstance(p.gold, str) else p.gold
    ok = any(extracted == _normalise(g, p) for g in golds)
    return Verdict(1.0 if ok else 0.0, "ok" if ok else "wrong", "exact", extracted=extracted)


def _check_exact(p: ExactParams) -> None:
    if isinstance(p.gold, list) and not p.gold:
        raise ValueError("gold must name at least one answer - at `$.gold`")
    if p.after == "":
        raise ValueError("after must not be empty - at `$.after`")


class RegexParams(Struct, frozen=True, forbid_unknown_fields=True):
    # Python regular expression the completion must match; a group named
    # "answer" (else the whole match) becomes the extracted answer.
    pattern: Annotated[str, Meta(min_length=1)]
    # "full": the whole (stripped) completion must match; "search": a match anywhere.
    mode: Literal["full", "search"] = "search"
    ignore_case: bool = False
    # "." also matches a newline.
    dotall: bool = False
    # "^" and "$" match at every line.
    multiline: bool = False


def regex_flags(p: RegexParams) -> int:
    """The ``re`` flags the params ask for."""
    flags = (re.IGNORECASE if p.ignore_case else 0) | (re.DOTALL if p.dotall else 0)
    return flags | (re.MULTILINE if p.multiline else 0)


def _compile(p: RegexParams) -> re.Pattern[str]:
    return _compiled(p.pattern, regex_flags(p))


_cache: dict[tuple[str, int], re.Pattern[str]] = {}


def _compiled(pattern: str, flags: int) -> re.Pattern[str]:
    key = (pattern, flags)
    if key not in _cache:
        if len(_cache) > 256:
            _cache.clear()
        _cache[key] = re.compile(pattern, flags)
    return _cache[key]


def _check_regex(p: RegexParams) -> None:
    try:
        _compile(p)
    except re.error as e:
        raise ValueError(f"invalid pattern {p.pattern!r}: {e} - at `$.pattern`") from None


def score_regex(completion: str, p: RegexParams, ctx: VerifyContext) -> Verdict:
    rx = _compile(p)
    m = rx.fullmatch(completion.strip()) if p.mode == "full" else rx.search(completion)
    if m is None:
        return Verdict(0.0, "wrong", "regex")
    extracted = m.group("answer") if "answer" in rx.groupindex else m.group(0)
    return Verdict(1.0, "ok", "regex", extracted=extracted)


EXACT = Verifier("exact", ExactParams, score_exact, check=_check_exact)
REGEX = Verifier("regex", RegexParams, score_regex, check=_check_regex)

__all__ = ["EXACT", "REGEX", "ExactParams", "RegexParams", "extract_after", "regex_flags", "score_exact", "score_regex"]
