"""What the model wrote in one request, as both APIs show it: visible text and tool calls.

The model's turn is parsed with the run's tool format (``[rollout] tool_format``,
``rlvr.rollout.tools.parse_tool_calls``). Only calls of a tool the request
offered become calls (OpenAI ``tool_calls``, Anthropic ``tool_use`` blocks);
the markup of each such call is cut out of the text, and what remains (stripped
when a call was cut) is the visible text. Anything else stays text, never an
error: a call of a tool the request did not offer, a ``<tool_call>`` that is not
JSON, any output at all when the request offered no tools or said
``tool_choice = "none"``. With the ``plain`` format a call ``name(argument)`` is
given to the offered tool's one parameter; a tool with another number of
parameters cannot be called that way, and the line stays text.

``reply_key`` is how an assistant message the agent sends back is recognised as
one the model wrote (rollout/agents/session.py puts the model's own text back in
its place): the visible text and each call's name and arguments, canonical JSON.
Call ids are not part of it, so an agent may rename them.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from rlvr.rollout.tools import ToolFormat, parse_tool_calls


@dataclass(frozen=True)
class ReplyCall:
    id: str  # minted here: "call_..." for OpenAI, the Anthropic wire renames it "toolu_..."
    name: str
    arguments: dict[str, Any]


def parse_reply(text: str, fmt: ToolFormat, offered: dict[str, dict[str, Any]] | None) -> tuple[str, list[ReplyCall]]:
    """(visible text, calls) of the model's ``text``; ``offered``: the request's tools by name, each its
    JSON-schema ``parameters`` (None or {}: no tool may be called)."""
    if not offered:
        return text, []
    if fmt == "ask":  # the one tool offered, no arguments: a turn that is nothing but "=" (rollout/tools.py)
        found, _ = parse_tool_calls(text, fmt, dict.fromkeys(offered))  # type: ignore[arg-type]
        return ("", [ReplyCall(f"call_{secrets.token_hex(12)}", c.name, {}) for c in found]) if found else (text, [])
    found, _ = parse_tool_calls(text, fmt, {})
    calls: list[ReplyCall] = []
    visible = text
    for call in found:
        schema = offered.get(call.name)
        if schema is None:
            continue
        args = call.arguments
        if fmt == "plain":
            names = list((schema or {}).get("properties", {}))
            if len(names) != 1:
                continue
            args = {names[0]: args["_"]}
        cut = _cut(visible, call.raw, fmt)
        if cut is None:
            continue
        visible = cut
        calls.append(ReplyCall(f"call_{secrets.token_hex(12)}", call.name, args))
    return (visible.strip() if calls else visible), calls


def _cut(text: str, raw: str, fmt: ToolFormat) -> str | None:
    """``text`` without the markup of the call parsed from ``raw``."""
    if fmt == "hermes":
        pattern = re.compile(r"<tool_call>\s*" + re.escape(raw) + r"\s*</tool_call>", re.DOTALL)
        return pattern.sub("", text, count=1) if pattern.search(text) else None
    if fmt == "llama3":
        return ""  # the whole turn is the call
    at = text.find(raw)
    return None if at < 0 else text[:at] + text[at + len(raw):]


def canonical_arguments(arguments: Any) -> str:
    """Arguments as canonical JSON (a JSON string is read first: OpenAI sends them so)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def reply_key(text: str, calls: list[tuple[str, Any]]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What identifies an assistant message: its visible text and (name, canonical arguments) of each call."""
    return text or "", tuple((name, canonical_arguments(args)) for name, args in calls)


__all__ = ["ReplyCall", "canonical_arguments", "parse_reply", "reply_key"]
