"""Tools for multi-turn episodes: typed Python functions, their JSON schemas, and the model's calls.

A tool is a plain function (sync or async) with type hints, made a ``Tool``
with ``@tool``: its JSON schema (OpenAI function format, what chat templates
take as ``tools=``) comes from the signature, its description from the
docstring. An environment offers its tools (``Environment.tools``); the model's
calls are parsed from its turn in the format the model was trained on
(``parse_tool_calls``):

- ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
  (Qwen2.5, Qwen3 and every Hermes-style template); several per turn;
- ``llama3``: the turn is one JSON object ``{"name": ..., "parameters": {...}}``
  (optionally after ``<|python_tag|>``), as Llama 3.1's template asks;
- ``plain``: for tiny models that cannot write JSON, a line that is nothing but
  ``name(argument)``, ``name`` an identifier: the text between the first ``(``
  and the last ``)`` is the tool's one parameter, as a string; several lines,
  several calls. Such a line is a call whatever the name: one the environment
  does not offer (a misspelling) is answered ``error: unknown tool ...``, never
  passed to ``step`` as an answer. A name inside a sentence is no call.
- ``ask``: for a model that cannot spell a name at all (the built-in character
  model): a turn that is nothing but ``=`` calls the one tool offered, with no
  arguments (examples/agent_calc/); with no tool or several offered, it is no call.

``call_tool`` runs one call under a timeout and always returns a
``ToolResult``: the function's answer as text, or an error the model is told
(``error: ...``): an unknown tool, bad arguments, an exception, a timeout.
Every error is also counted by the episode (``Episode.tool_errors``); none is
ever a silent empty answer.
"""

from __future__ import annotations

import inspect
import json
import re
import time
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

ToolFormat = Literal["hermes", "llama3", "plain", "ask"]
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_PLAIN = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\((.*)\)\s*$", re.MULTILINE)
_RESULT_CHARS = 8192  # what the model is shown of one tool result


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    fn: Callable[..., Any]
    timeout_s: float | None = None  # None: the rollout's tool_timeout_s

    def schema(self) -> dict[str, Any]:
        """The OpenAI function schema, as chat templates take it in ``tools=``."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None,
         timeout_s: float | None = None) -> Any:
    """Make a typed function a ``Tool`` (``@tool`` or ``@tool(name=..., timeout_s=...)``)."""

    def make(f: Callable[..., Any]) -> Tool:
        return Tool(name or f.__name__, description or inspect.getdoc(f) or "", _parameters(f), f, timeout_s)

    return make(fn) if fn is not None else make


def _parameters(f: Callable[..., Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(f)
    props, required = {}, []
    for p in inspect.signature(f).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        props[p.name] = _json_type(hints.get(p.name, str))
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
    return {"type": "object", "properties": props, "required": required}


def _json_type(t: Any) -> dict[str, Any]:
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(t) if a is not type(None)]
        return _json_type(options[0]) if options else {}
    if origin is Literal:
        return {"enum": list(typing.get_args(t))}
    base = origin or t
    return {"type": _JSON_TYPES[base]} if base in _JSON_TYPES else {}


class ToolCall(msgspec.Struct, frozen=True):
    name: str
    arguments: dict[str, Any]
    raw: str  # the text the call was parsed from


class ToolResult(msgspec.Struct, frozen=True):
    name: str
    content: str  # what the model is shown
    error: str = ""  # "" when the tool answered; else why not (the content says it too)
    timed_out: bool = False
    seconds: float = 0.0


def parse_tool_calls(text: str, fmt: ToolFormat, tools: dict[str, Tool]) -> tuple[list[ToolCall], list[str]]:
    """(the calls in ``text``, the problems with what looked like calls but is not one)."""
    if fmt == "hermes":
        calls, problems = [], []
        for raw in _HERMES.findall(text):
            call, problem = _json_call(raw, "arguments")
            if call is not None:
                calls.append(call)
            else:
                problems.append(problem)
        return calls, problems
    if fmt == "llama3":
        body = text.strip().removeprefix("<|python_tag|>").strip()
        if not body.startswith("{"):
            return [], []
        call, problem = _json_call(body, "parameters")
        return ([call], []) if call is not None else ([], [problem])
    if fmt == "ask":
        return ([ToolCall(next(iter(tools)), {}, "=")], []) if text.strip() == "=" and len(tools) == 1 else ([], [])
    # Every such line is a call: an unknown name gets call_tool's "unknown tool" error, as in JSON formats.
    calls = [ToolCall(m.group(1), {"_": m.group(2)}, m.group(0).strip()) for m in _PLAIN.finditer(text)]
    return calls, []


def _json_call(raw: str, key: str) -> tuple[ToolCall | None, str]:
    try:
        obj = json.loads(raw)
    except ValueError as e:
        return None, f"a tool call that is not JSON ({e}): {raw[:200]}"
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None, f"a tool call without a name: {raw[:200]}"
    args = obj.get(key, obj.get("arguments", obj.get("parameters", {})))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            return None, f"tool call arguments that are not a JSON object: {raw[:200]}"
    if not isinstance(args, dict):
        return None, f"tool call arguments that are not an object: {raw[:200]}"
    return ToolCall(obj["name"], args, raw), ""


async def call_tool(tools: dict[str, Tool], call: ToolCall, default_timeout_s: float) -> ToolResult:
    """Run ``call``; every failure is an error result the model is shown, never an exception."""
    import anyio

    started = time.monotonic()
    t = tools.get(call.name)
    if t is None:
        return _error(call.name, f"unknown tool {call.name!r} (tools: {', '.join(sorted(tools)) or 'none'})", started)
    args = call.arguments
    if set(args) == {"_"}:  # the plain format: the one string argument
        names = list(t.parameters.get("properties", {}))
        if len(names) != 1:
            return _error(call.name, f"{call.name} takes {len(names)} arguments; write it as JSON", started)
        args = {names[0]: args["_"]}
    try:
        inspect.signature(t.fn).bind(**args)
    except TypeError as e:
        return _error(call.name, f"bad arguments for {call.name}: {e}", started)
    timeout = t.timeout_s or default_timeout_s
    try:
        with anyio.fail_after(timeout):
            if inspect.iscoroutinefunction(t.fn):
                value = await t.fn(**args)
            else:  # a sync tool runs in a thread: it must not block the rollout's event loop
                value = await anyio.to_thread.run_sync(lambda: t.fn(**args), abandon_on_cancel=True)
    except TimeoutError:
        return ToolResult(call.name, f"error: {call.name} timed out after {timeout:g}s",
                          f"timed out after {timeout:g}s", True, time.monotonic() - started)
    except Exception as e:  # the tool's own failure is the model's to read
        return _error(call.name, f"{type(e).__name__}: {e}", started)
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return ToolResult(call.name, text[:_RESULT_CHARS], seconds=time.monotonic() - started)


def _error(name: str, why: str, started: float) -> ToolResult:
    return ToolResult(name, f"error: {why}"[:_RESULT_CHARS], why[:_RESULT_CHARS], seconds=time.monotonic() - started)


__all__ = ["Tool", "ToolCall", "ToolFormat", "ToolResult", "call_tool", "parse_tool_calls", "tool"]
