"""Locate the final answer in a model response (or in a gold that is a whole
worked solution), and name the route that found it.

Routes, most trusted first; ``strictness`` says how far down extraction may go:
- ``boxed``: the last ``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces, also
  ``\\boxed 5``; a run of boxes separated only by commas or "and" becomes one
  comma list, and boxes with only a plus or minus sign between them one sum:
  ``\\boxed{1} + \\boxed{\\sqrt{2}}`` is ``1 + \\sqrt{2}``, not ``\\sqrt{2}``);
- ``answer_is``: "the answer is ..." / "Answer: ..." up to the end of its
  sentence or math group; ``hashes``: the GSM8K marker ``#### ...``;
- ``bare``: the whole response is the answer (short, no prose words; any
  Chinese, Japanese or Korean text is prose), so it is parsed as one
  expression: ``\\frac{10}{9}`` is 10/9, never "9";
- then, for prose only (strictness ``last_number``), the scorer lets
  math-verify search the text (``prose``) and falls back to ``last_number``.

Every scan here is linear in the response length (``rfind`` and single-pass
regexes), so a 1 MB response costs milliseconds. This module does not parse
or judge the answer.
"""

from __future__ import annotations

import re
from typing import Literal

from rlvr.verify.math import forms

Strictness = Literal["boxed", "answer", "last_number"]

_BOX_WORDS = ("\\boxed", "\\fbox")
_MAX_BOX_RUN = 8  # how many adjacent boxes may be joined into one list
_MAX_BOX_TRIES = 16  # boxes looked at, from the end: keeps the scan linear
_MAX_SCAN = 20_000  # chars one brace group may span; longer is absurd anyway
# What may stand between two boxes of one answer: separators, \quad, "and",
# a short \text{...} ("for part (a) and"), up to two plain words ("papers
# and"), math delimiters, the label of the next part ("y_2 ="). A full stop or anything longer starts a new statement.
_JOINER = re.compile(
    r"^(?:[\s$,;]|\\[()\[\]]|\\q?quad|\\[,;: ]|\\text\{[^{}]{0,40}\}|[A-Za-z]{1,12}(?=[\s$,;\\]|$)"
    # the label of the next part: "$y_1 = \boxed{2}$ and $y_2 = \boxed{3}$"
    r"|[A-Za-z](?:_\{?[A-Za-z0-9]{1,3}\}?)?\s*=){0,12}$"
)
_MAX_JOINER = 60
_SUM_JOINER = re.compile(r"^[\s$]*([+-])[\s$]*$")
_TEXTLESS = re.compile(r"\\text\{[^{}]*\}|\\[a-zA-Z]+")
_ANSWER_IS = re.compile(
    r"(?:final answer|the answer|answer)\s*(?:\*\*)?\s*(?:is\s*:?|:)\s*(?:\*\*)?\s*",
    re.IGNORECASE,
)


def _balanced(text: str, open_at: int) -> int | None:
    """Index just past the brace group opened at ``text[open_at] == '{'``.

    Escaped braces (``\\{``, ``\\}``) are literal in LaTeX and do not count.
    """
    depth = 0
    i = open_at
    n = min(len(text), open_at + _MAX_SCAN)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _box_at(text: str, start: int, word: str) -> tuple[str, int] | None:
    """The content of the box starting at ``start`` and the index past it."""
    i = start + len(word)
    if i < len(text) and (text[i].isalpha()):
        return None  # e.g. \boxedfoo is another macro
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text):
        return None
    if text[i] == "{":
        end = _balanced(text, i)
        if end is None:
            if len(text) - i > _MAX_SCAN:  # give the scorer an over-long answer to refuse
                return text[i + 1 : i + 1 + _MAX_SCAN], len(text)
            return None
        return text[i + 1 : end - 1], end
    m = re.match(r"[^\s$]+", text[i : i + 200])  # \boxed 5
    if m is None:
        return None
    return m.group(0).rstrip(".,"), i + m.end()


def _joins(between: str) -> bool:
    """Do two boxes with ``between`` between them give one answer? Plain
    words may stand there only as "... and"/"... or" ("papers and"), so
    "\\boxed{1} then \\boxed{2}" keeps only the last box."""
    if len(between) > _MAX_JOINER or not _JOINER.match(between):
        return False
    words = re.findall(r"[A-Za-z]{2,}", _TEXTLESS.sub(" ", between))
    return not words or (len(words) <= 2 and words[-1].lower() in ("and", "or"))


def _box_starts(text: str, before: int) -> int:
    """Start of the last box word in ``text[:before]``, or -1."""
    best = -1
    for word in _BOX_WORDS:
        best = max(best, text.rfind(word, 0, before))
    return best


def _join(between: str) -> str | None:
    """How two boxes with ``between`` between them make one answer: ``"+"`` or ``"-"`` for a sum
    (``\\boxed{1} + \\boxed{\\sqrt{2}}``), ``", "`` for a list, None when they do not."""
    m = _SUM_JOINER.match(between)
    if m is not None:
        return m.group(1)
    return ", " if _joins(between) else None


def _joined(items: list[str], joins: list[str]) -> str:
    """Boxes in reading order with the joins between them; a term after a minus sign or one
    with its own sign keeps its parentheses (``1 - (2 + \\sqrt{3})``)."""
    text = items[0]
    for join, item in zip(joins, items[1:]):
        if join == ", ":
            text += ", " + item
        elif item.lstrip().startswith(("+", "-")) or (join == "-" and re.search(r"[+-]", item)):
            text += f" {join} ({item})"
        else:
            text += f" {join} {item}"
    return text


def extract_boxed(text: str) -> str | None:
    """The last box, joined with the boxes right before it when only separators lie between them
    (``\\boxed{1}, \\boxed{2}`` -> ``1, 2``), or only a plus or minus sign (a sum, ``1 + \\sqrt{2}``)."""
    start = _box_starts(text, len(text))
    found: list[str] = []
    joins: list[str] = []  # joins[k] stands before found[k]: both lists run from the end
    boundary = len(text)
    tries = 0
    while start >= 0 and len(found) < _MAX_BOX_RUN and tries < _MAX_BOX_TRIES:
        tries += 1
        word = "\\fbox" if text.startswith("\\fbox", start) else "\\boxed"
        box = _box_at(text, start, word)
        if box is not None:
            content, end = box
            if end <= boundary:  # a box nested in the previous one is ignored
                if found:
                    join = _join(text[end:boundary])
                    if join is None or (joins and (join == ", ") != (joins[0] == ", ")):
                        break  # no join, or a sum next to a list: the run ends here
                    joins.append(join)
                found.append(content)
                boundary = start
        elif found:
            break
        # (an unterminated last box: look further back)
        start = _box_starts(text, start)
    if not found:
        return None
    return _joined(found[::-1], joins[::-1])


def _rest_of_sentence(text: str) -> str:
    text = text.lstrip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if text.startswith(left):
            end = text.find(right, len(left), 2000)
            while end > 0 and text[end - 1] == "\\" and right == "$":  # \$ is a dollar sign
                end = text.find(right, end + 1, 2000)
            if end > 0:
                return text[len(left) : end].strip()
    line = text.split("\n", 1)[0]
    line = line[:500]
    # A full stop followed by a space or the end closes the sentence; a dot
    # inside a number (3.5) does not.
    m = re.search(r"\.(?:\s|$)", line)
    if m is not None:
        line = line[: m.start()]
    return line.strip().strip("*").strip()


def _answer_is_at(text: str) -> tuple[str | None, int, bool]:
    """The "answer is" answer, where its marker starts (-1 when none), and
    whether the marker says "final answer"."""
    last = None
    for last in _ANSWER_IS.finditer(text):
        pass
    if last is None:
        return None, -1, False
    answer = _rest_of_sentence(text[last.end() :])
    return answer or None, last.start(), "final" in last.group(0).lower()


def extract_answer_is(text: str) -> str | None:
    return _answer_is_at(text)[0]


def extract_hashes(text: str) -> str | None:
    at = text.rfind("####")
    if at < 0:
        return None
    answer = _rest_of_sentence(text[at + 4 :])
    return answer or None


_NUMBER = re.compile(r"(?<![A-Za-z_])(?:-?(?:\d{1,3}(?:[,\u00a0\u202f ]\d{3})+|\d+)(?:[.,]\d+)?(?:\s*/\s*\d+)?|-?\.\d+)(?![A-Za-z_\d])")
_COMMAND = re.compile(r"\\(?:begin|end)\s*\{[^{}]*\}|\\(?:text|textbf|textit|mathrm|mbox|operatorname)\s*\{[^{}]*\}|\\[a-zA-Z]+")
_WORD = re.compile(r"[^\W\d_]{3,}")
# Words that may follow a bare answer without making it prose.
_TRAILING_WORDS = frozenset(
    "pct percent percentage degrees degree meters metres units dollars cents euros cm km inches feet hours "
    "minutes seconds days years miles pounds grams kg liters litres and or".split()
)
_MAX_BARE = 300


def extract_last_number(text: str) -> str | None:
    last = None
    for last in _NUMBER.finditer(text):
        pass
    return None if last is None else last.group(0).strip()


def strip_delimiters(text: str) -> str:
    text = text.strip().rstrip(".").strip()
    for left, right in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if text.startswith(left) and text.endswith(right) and len(text) >= len(left) + len(right):
            text = text[len(left) : len(text) - len(right)].strip()
    return text


# Chinese, Japanese and Korean script: one character is a word, so any of it makes the text prose
# ("答案：12" is a sentence, not an expression to read whole).
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def is_bare(text: str) -> bool:
    """The whole text is one answer: short, and no words beyond a unit or two, or a range
    ("between 12 and 13", ``forms.range_list``)."""
    text = text.strip()
    if not text or len(text) > _MAX_BARE or _CJK.search(text):
        return False
    if forms.range_list(strip_delimiters(text)) != strip_delimiters(text):
        return True
    words = [w.lower() for w in _WORD.findall(_COMMAND.sub(" ", text))]
    return all(w in _TRAILING_WORDS for w in words) and len(words) <= 2


def extract_answer(text: str, strictness: Strictness) -> tuple[str | None, str]:
    """``(answer, route)``. ``route`` is ``prose`` when only a search of the
    free text can find the answer (the scorer does that), ``none`` when the
    strictness forbids going further."""
    boxed = extract_boxed(text)
    if boxed is not None:
        # "... \\boxed{255} ... Final Answer: The final answer is $10,455$":
        # a final-answer marker after the last box is the later word.
        # ("... so our answer is correct" is no such marker: it must say "final").
        stated, at, final = _answer_is_at(text) if strictness != "boxed" else (None, -1, False)
        if stated is not None and final and at > _box_starts(text, len(text)):
            return stated, "answer_is"
        return boxed, "boxed"
    if strictness == "boxed":
        return None, "none"
    for how, rule in (("answer_is", extract_answer_is), ("hashes", extract_hashes)):
        found = rule(text)
        if found is not None:
            return found, how
    if is_bare(text):
        return strip_delimiters(text), "bare"
    if strictness == "answer":
        return None, "none"
    return None, "prose"


__all__ = ["Strictness", "extract_answer", "extract_boxed", "extract_last_number", "is_bare", "strip_delimiters"]
