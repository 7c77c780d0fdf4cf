"""The OpenAI Chat Completions wire: request bodies in, chat-template messages out, responses and chunks back.

Requests are decoded with msgspec into the types below (unknown fields are
ignored, as OpenAI-compatible servers do); a wrong type or a missing field is a
``msgspec.ValidationError`` whose message names the field (``$.messages[0].role``),
which the endpoint answers 400. What is taken:

- ``messages``: roles ``system`` / ``developer`` (a system message), ``user``,
  ``assistant`` (with ``tool_calls``), ``tool`` (``tool_call_id``); content a
  string or a list of text parts (joined with "\\n"); any other part (an image)
  is refused 400.
- ``tools`` (``type = "function"``) and ``tool_choice``: ``"none"`` shows the
  tools and parses no call; ``"auto"``, ``"required"`` or a named function are
  accepted and not enforced (the policy decides what it writes).
- ``stream`` (server-sent events, ``stream_options.include_usage``), ``logprobs``
  (the behaviour log-prob of each sampled token: what is trained), ``n = 1``.
- Refused 400: ``n`` other than 1; ``top_logprobs`` above 0 (only the sampled
  token's log-prob is recorded).
- Ignored, on purpose: ``model``, ``temperature``, ``top_p``, ``max_tokens``,
  ``max_completion_tokens``, ``stop``, ``seed``, penalties and the rest of the
  sampling fields. Sampling is the run's (the task's ``SamplingParams``): an
  agent's own values never change what is trained.

A stream is the whole answer, generated first, then sent as chunks (a role chunk,
one content chunk with its log-probs, one chunk per tool call, the finish chunk,
the usage chunk when asked, ``[DONE]``): the engine has no token stream.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any, Literal

import msgspec
from msgspec import Struct

from rlvr.rollout.agents.session import AgentRefusedError, Reply


class _TextPart(Struct, tag="text", tag_field="type"):
    text: str


class _FunctionCall(Struct):
    name: str
    arguments: str = "{}"  # a JSON object, as a string


class _ToolCall(Struct):
    function: _FunctionCall
    id: str = ""
    type: Literal["function"] = "function"


class _Message(Struct, kw_only=True):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[_TextPart] | None = None
    name: str | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None


class _FunctionDef(Struct, kw_only=True):
    name: str
    description: str = ""
    parameters: dict[str, Any] = {}


class _Tool(Struct, kw_only=True):
    function: _FunctionDef
    type: Literal["function"] = "function"


class _StreamOptions(Struct):
    include_usage: bool = False


class ChatRequest(Struct, kw_only=True):
    messages: list[_Message]
    model: str = ""
    tools: list[_Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    stream: bool = False
    stream_options: _StreamOptions | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    n: int | None = None


def decode_request(body: bytes) -> ChatRequest:
    req = msgspec.json.decode(body, type=ChatRequest)
    if req.n not in (None, 1):
        raise AgentRefusedError(400, "invalid_request_error", f"n must be 1, got {req.n}", "n")
    if req.top_logprobs:
        raise AgentRefusedError(400, "invalid_request_error", "top_logprobs is not served: only the sampled "
                                "token's log-prob is recorded (logprobs = true gives it)", "top_logprobs")
    if not req.messages:
        raise AgentRefusedError(400, "invalid_request_error", "messages must not be empty", "messages")
    return req


def template_messages(req: ChatRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, bool]:
    """(messages in chat-template form, tools as function schemas, whether to parse tool calls)."""
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool call id -> function name, for tool messages
    for i, m in enumerate(req.messages):
        content = m.content if isinstance(m.content, str) or m.content is None else "\n".join(
            p.text for p in m.content)
        msg: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role, "content": content or ""}
        if m.role == "assistant" and m.tool_calls:
            calls = []
            for j, c in enumerate(m.tool_calls):
                try:
                    args = json.loads(c.function.arguments or "{}")
                except ValueError:
                    args = None
                if not isinstance(args, dict):
                    raise AgentRefusedError(400, "invalid_request_error", "tool call arguments must be a JSON "
                                            "object", f"messages[{i}].tool_calls[{j}].function.arguments")
                names[c.id] = c.function.name
                calls.append({"type": "function", "id": c.id, "function": {"name": c.function.name,
                                                                          "arguments": args}})
            msg["tool_calls"] = calls
        if m.role == "tool":
            msg["tool_call_id"] = m.tool_call_id or ""
            msg["name"] = m.name or names.get(m.tool_call_id or "", "")
        out.append(msg)
    tools = [{"type": "function", "function": {"name": t.function.name, "description": t.function.description,
                                               "parameters": t.function.parameters}} for t in req.tools or []]
    return out, tools or None, req.tool_choice != "none"


def _message(reply: Reply) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": reply.content if reply.content or not reply.calls else None}
    if reply.calls:
        msg["tool_calls"] = [_call(c) for c in reply.calls]
    return msg


def _call(c: Any, index: int | None = None) -> dict[str, Any]:
    call = {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
    return call if index is None else {"index": index, **call}


def _finish(reply: Reply) -> str:
    return "tool_calls" if reply.calls else "length" if reply.finish_reason == "length" else "stop"


def _logprobs(reply: Reply, codec: Any) -> dict[str, Any]:
    content = []
    for i, lp in zip(reply.ids, reply.logprobs, strict=True):
        token = codec.decode([i])
        content.append({"token": token, "logprob": lp, "bytes": list(token.encode()), "top_logprobs": []})
    return {"content": content}


def _usage(reply: Reply) -> dict[str, int]:
    return {"prompt_tokens": reply.prompt_tokens, "completion_tokens": len(reply.ids),
            "total_tokens": reply.prompt_tokens + len(reply.ids)}


def completion(req: ChatRequest, reply: Reply, model: str, codec: Any) -> dict[str, Any]:
    """The ``chat.completion`` object."""
    return {
        "id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": _message(reply), "finish_reason": _finish(reply),
                     "logprobs": _logprobs(reply, codec) if req.logprobs else None}],
        "usage": _usage(reply),
    }


def chunks(req: ChatRequest, reply: Reply, model: str, codec: Any) -> list[bytes]:
    """The ``chat.completion.chunk`` events of the answer, as server-sent-event lines, ``[DONE]`` last."""
    head = {"id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}

    events = [chunk({"role": "assistant", "content": ""})]
    if reply.content:
        events.append(chunk({"content": reply.content}, logprobs=_logprobs(reply, codec) if req.logprobs else None))
    elif req.logprobs:
        events.append(chunk({}, logprobs=_logprobs(reply, codec)))
    events += [chunk({"tool_calls": [_call(c, k)]}) for k, c in enumerate(reply.calls)]
    events.append(chunk({}, _finish(reply)))
    if req.stream_options is not None and req.stream_options.include_usage:
        events.append({**head, "choices": [], "usage": _usage(reply)})
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


def error(status: int, kind: str, message: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error object."""
    code = {401: "invalid_api_key"}.get(status, kind if kind == "context_length_exceeded" else None)
    etype = "invalid_request_error" if kind == "context_length_exceeded" else kind
    return {"error": {"message": message, "type": etype, "param": param, "code": code}}


def models(model: str) -> dict[str, Any]:
    """The model list, in a shape both SDKs read: OpenAI's fields and Anthropic's (``type``,
    ``display_name``, ``created_at``, ``lifecycle``; ``has_more``, ``first_id``, ``last_id``)."""
    info = {"id": model, "object": "model", "created": 0, "owned_by": "rlvr", "type": "model", "display_name": model,
            "created_at": "1970-01-01T00:00:00Z", "lifecycle": "active"}
    return {"object": "list", "data": [info], "has_more": False, "first_id": model, "last_id": model}


__all__ = ["ChatRequest", "chunks", "completion", "decode_request", "error", "models", "template_messages"]
