"""The Anthropic Messages wire: request bodies in, chat-template messages out, messages and stream events back.

Requests decode with msgspec into the types below (unknown fields, such as
``cache_control`` or ``metadata``, are ignored); a wrong type, a missing field or
a content block of another type (an image, a document) is a
``msgspec.ValidationError`` naming the field, answered 400. What is taken:

- ``system`` (a string or text blocks) becomes a system message;
- ``messages``: ``user`` content (a string, text blocks, ``tool_result`` blocks:
  each result becomes a ``tool`` message, in order, before the text) and
  ``assistant`` content (text blocks, joined, and ``tool_use`` blocks, which
  become the message's tool calls);
- ``tools`` (``name``, ``description``, ``input_schema``) and ``tool_choice``
  (``{"type": "none"}`` shows the tools and parses no call; ``auto``, ``any``
  and ``tool`` are accepted and not enforced);
- ``stream``: the answer is generated whole, then sent as Anthropic's events
  (``message_start``, per block ``content_block_start`` / ``content_block_delta``
  (``text_delta`` or ``input_json_delta``) / ``content_block_stop``,
  ``message_delta`` with the stop reason and usage, ``message_stop``).
- Ignored, on purpose: ``model``, ``max_tokens`` (which the Messages API makes
  every client send), ``temperature``, ``top_p``, ``top_k``, ``stop_sequences``,
  ``thinking``. Sampling is the run's: an agent's own values never change what is
  trained.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, Literal

import msgspec
from msgspec import Struct

from rlvr.rollout.agents.session import AgentRefusedError, Reply


class _Text(Struct, tag="text", tag_field="type"):
    text: str


class _ToolUse(Struct, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: dict[str, Any] = {}


class _ToolResult(Struct, tag="tool_result", tag_field="type"):
    tool_use_id: str
    content: str | list[_Text] = ""
    is_error: bool = False


class _Message(Struct):
    role: Literal["user", "assistant"]
    content: str | list[_Text | _ToolUse | _ToolResult]


class _Tool(Struct, kw_only=True):
    name: str
    description: str = ""
    input_schema: dict[str, Any] = {}


class _ToolChoice(Struct, kw_only=True):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None


class MessagesRequest(Struct, kw_only=True):
    messages: list[_Message]
    model: str = ""
    max_tokens: int | None = None
    system: str | list[_Text] | None = None
    tools: list[_Tool] | None = None
    tool_choice: _ToolChoice | None = None
    stream: bool = False


def decode_request(body: bytes) -> MessagesRequest:
    req = msgspec.json.decode(body, type=MessagesRequest)
    if not req.messages:
        raise AgentRefusedError(400, "invalid_request_error", "messages: at least one message is required", "messages")
    return req


def _text(content: str | list[_Text]) -> str:
    return content if isinstance(content, str) else "".join(b.text for b in content)


def template_messages(req: MessagesRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, bool]:
    """(messages in chat-template form, tools as function schemas, whether to parse tool calls)."""
    out: list[dict[str, Any]] = []
    if req.system:
        out.append({"role": "system", "content": _text(req.system)})
    names: dict[str, str] = {}  # tool_use id -> tool name
    for m in req.messages:
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
            continue
        texts = [b.text for b in m.content if isinstance(b, _Text)]
        if m.role == "assistant":
            uses = [b for b in m.content if isinstance(b, _ToolUse)]
            msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
            if uses:
                names.update((u.id, u.name) for u in uses)
                msg["tool_calls"] = [{"type": "function", "id": u.id, "function": {"name": u.name,
                                                                                   "arguments": u.input}}
                                     for u in uses]
            out.append(msg)
            continue
        for b in m.content:
            if isinstance(b, _ToolResult):
                out.append({"role": "tool", "content": _text(b.content), "tool_call_id": b.tool_use_id,
                            "name": names.get(b.tool_use_id, "")})
        if texts or not any(isinstance(b, _ToolResult) for b in m.content):
            out.append({"role": "user", "content": "\n".join(texts)})
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                               "parameters": t.input_schema}} for t in req.tools or []]
    parse = req.tool_choice is None or req.tool_choice.type != "none"
    return out, tools or None, parse


def _blocks(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.content}] if reply.content or not reply.calls else []
    blocks += [{"type": "tool_use", "id": "toolu_" + c.id.removeprefix("call_"), "name": c.name,
                "input": c.arguments} for c in reply.calls]
    return blocks


def _stop(reply: Reply) -> str:
    return "tool_use" if reply.calls else "max_tokens" if reply.finish_reason == "length" else "end_turn"


def message(reply: Reply, model: str) -> dict[str, Any]:
    """The ``message`` object."""
    return {"id": f"msg_{secrets.token_hex(12)}", "type": "message", "role": "assistant", "model": model,
            "content": _blocks(reply), "stop_reason": _stop(reply), "stop_sequence": None,
            "usage": {"input_tokens": reply.prompt_tokens, "output_tokens": len(reply.ids)}}


def events(reply: Reply, model: str) -> list[bytes]:
    """The answer as Anthropic's server-sent events."""
    whole = message(reply, model)
    start = {**whole, "content": [], "stop_reason": None, "usage": {"input_tokens": reply.prompt_tokens,
                                                                     "output_tokens": 0}}
    out: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(whole["content"]):
        if block["type"] == "text":
            opened, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            opened = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        out += [("content_block_start", {"type": "content_block_start", "index": i, "content_block": opened}),
                ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": i})]
    out += [("message_delta", {"type": "message_delta", "delta": {"stop_reason": whole["stop_reason"],
                                                                   "stop_sequence": None},
                               "usage": {"output_tokens": len(reply.ids)}}),
            ("message_stop", {"type": "message_stop"})]
    return [f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in out]


_KINDS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
          413: "request_too_large", 500: "api_error", 503: "api_error"}


def error(status: int, kind: str, message: str, param: str | None = None) -> dict[str, Any]:
    """Anthropic's error object (the field, when known, is named in the message)."""
    text = f"{param}: {message}" if param and not message.startswith(param) else message
    return {"type": "error", "error": {"type": _KINDS.get(status, "api_error"), "message": text}}


__all__ = ["MessagesRequest", "decode_request", "error", "events", "message", "template_messages"]
