"""The ``format`` verifier: is the completion in the shape the prompt asked for?

``style = "tags"`` (the default): is the reasoning inside the configured tags, in order?

With the default tags a well-formed completion reads
``<think>...</think><answer>...</answer>``: every tag opens and closes exactly
once, in the configured order, and none is empty. ``style = "boxed"``: the
completion holds exactly one ``\\boxed{...}`` answer, not empty (prompts that
say "put the final answer in \\boxed{}"). Reward 1 (``ok``) or 0
(``wrong``); the detail says what was wrong. It judges the shape only, not the
answer: ``composite`` weighs it against an accuracy verifier (1.0 / 0.2).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from msgspec import Meta, Struct

from rlvr.protocol.samples import Verdict
from rlvr.verify.math.extract import extract_boxed
from rlvr.verify.registry import Verifier, VerifyContext

TagName = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_.:-]*$")]


class FormatParams(Struct, frozen=True, forbid_unknown_fields=True):
    # "tags": the tags below, in order. "boxed": exactly one non-empty \\boxed{} answer
    # (the tag keys are then ignored).
    style: Literal["tags", "boxed"] = "tags"
    # Tag names, in the order they must appear.
    tags: Annotated[tuple[TagName, ...], Meta(min_length=1)] = ("think", "answer")
    # Nothing but whitespace may stand outside and between the tags.
    strict: bool = True
    # The prompt already ends with the first opening tag (chat templates that
    # prefill "<think>"), so the completion starts inside it.
    first_tag_in_prompt: bool = False


def check_format(text: str, p: FormatParams) -> tuple[str | None, str]:
    """(content of the last tag, "") when well formed, else (None, the reason)."""
    pos = 0
    body = ""
    for i, tag in enumerate(p.tags):
        opening, closing = f"<{tag}>", f"</{tag}>"
        expected_openings = 0 if i == 0 and p.first_tag_in_prompt else 1
        if text.count(opening) != expected_openings:
            return None, f"{opening} appears {text.count(opening)} times, expected {expected_openings}"
        if text.count(closing) != 1:
            return None, f"{closing} appears {text.count(closing)} times, expected 1"
        if expected_openings:
            at = text.find(opening, pos)
            if at < 0:
                return None, f"{opening} out of order"
            if p.strict and text[pos:at].strip():
                return None, f"text before {opening}"
            pos = at + len(opening)
        end = text.find(closing, pos)
        if end < 0:
            return None, f"{closing} out of order"
        body = text[pos:end]
        if not body.strip():
            return None, f"<{tag}> is empty"
        pos = end + len(closing)
    if p.strict and text[pos:].strip():
        return None, f"text after </{p.tags[-1]}>"
    return body.strip(), ""


def check_boxed(text: str) -> tuple[str | None, str]:
    """(content of the one \\boxed{}, "") when there is exactly one, not empty; else (None, why)."""
    count = len(re.findall(r"\\(?:boxed|fbox)(?![A-Za-z])", text))
    if count != 1:
        return None, f"\\boxed appears {count} times, expected 1"
    content = extract_boxed(text)
    if content is None or not content.strip():
        return None, "\\boxed{} is empty or unclosed"
    return content.strip(), ""


def score_format(completion: str, p: FormatParams, ctx: VerifyContext) -> Verdict:
    content, reason = check_boxed(completion) if p.style == "boxed" else check_format(completion, p)
    if content is None:
        return Verdict(0.0, "wrong", "format", detail=reason)
    return Verdict(1.0, "ok", "format", extracted=content)


def _check(p: FormatParams) -> None:
    if len(set(p.tags)) != len(p.tags):
        raise ValueError(f"tags must be distinct, got {p.tags} - at `$.tags`")


FORMAT = Verifier("format", FormatParams, score_format, check=_check)

__all__ = ["FORMAT", "FormatParams", "check_boxed", "check_format", "score_format"]
