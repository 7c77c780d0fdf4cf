"""Render the vendored chat templates the way transformers does, and check them.

Run:  .venv/bin/python tests/data/chat_templates/check_templates.py

Each template is attached to a tiny byte-level BPE tokenizer built in memory
(no download), exactly as a test would, and rendered with
``apply_chat_template(..., tokenize=False)``. The script prints every
rendering (``repr`` and plain) and asserts the behaviours the README
documents; it exits non-zero if one does not hold. It also checks that
``render_jinja_template`` (the function ``apply_chat_template`` calls) gives
the same text, and that each file's SHA-256 is the one recorded in the README.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from transformers.utils.chat_template_utils import render_jinja_template

HERE = Path(__file__).resolve().parent

# file -> (special tokens the tokenizer needs for this template, SHA-256 of the file)
TEMPLATES = {
    "qwen2.5.jinja": (
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        "cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f",
    ),
    "qwen3.jinja": (
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5",
    ),
    # Llama's template starts with {{- bos_token }}: without a bos_token on the
    # tokenizer the prompt would not start with <|begin_of_text|>.
    "llama3.jinja": (
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65",
    ),
    "smollm2.jinja": (
        {
            "bos_token": "<|im_start|>",
            "eos_token": "<|im_end|>",
            "pad_token": "<|im_end|>",
            "unk_token": "<|endoftext|>",
        },
        "872be49dbb638044ad01b60388f48d469ff2980e5f0dccdc22ec907db54d0788",
    ),
}
SUPPORTS_TOOLS = {"qwen2.5.jinja", "qwen3.jinja", "llama3.jinja"}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "c",
            "parameters": {
                "type": "object",
                "properties": {"expr": {"type": "string"}},
                "required": ["expr"],
            },
        },
    }
]
ONE_TURN = [{"role": "user", "content": "hi"}]
MULTI_TURN = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "<think>r</think>ok"},
    {"role": "user", "content": "again"},
]
# A full tool round trip: the assistant calls calc, the tool answers.
# Arguments are a dict (Llama 3.1 requires a mapping; Qwen 2.5 tojson's it).
TOOL_ROUND_TRIP = [
    {"role": "user", "content": "2+2?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": {"expr": "2+2"}}}],
    },
    {"role": "tool", "content": "4"},
]

FAILURES: list[str] = []


def check(cond: bool, what: str) -> None:
    print(f"  [{'ok' if cond else 'FAIL'}] {what}")
    if not cond:
        FAILURES.append(what)


def tiny_tokenizer(special: dict[str, str]) -> PreTrainedTokenizerFast:
    """A byte-level BPE with a handful of tokens, built in memory."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return PreTrainedTokenizerFast(tokenizer_object=raw, **special)


def render(tok, messages, **kw) -> str:
    text = tok.apply_chat_template(messages, tokenize=False, **kw)
    # Same text straight from the renderer apply_chat_template uses.
    tools = kw.pop("tools", None)
    direct = render_jinja_template(
        conversations=[messages],
        tools=tools,
        chat_template=tok.chat_template,
        **tok.special_tokens_map,
        **kw,
    )
    direct = direct[0][0] if isinstance(direct, tuple) else direct
    if direct != text:
        FAILURES.append("render_jinja_template differs from apply_chat_template")
    return text


def show(title: str, text: str) -> None:
    print(f"--- {title}")
    print(f"repr: {text!r}")
    print(text)
    print("--- end")


def main() -> int:
    for name, (special, sha) in TEMPLATES.items():
        path = HERE / name
        raw = path.read_bytes()
        print(f"\n==================== {name} ({len(raw)} bytes)")
        check(hashlib.sha256(raw).hexdigest() == sha, "sha256 matches README")
        tok = tiny_tokenizer(special)
        tok.chat_template = raw.decode("utf-8")

        one = render(tok, ONE_TURN, add_generation_prompt=True)
        show("[user 'hi'] + generation prompt", one)
        multi = render(tok, MULTI_TURN, add_generation_prompt=True)
        show("[user 'hi', assistant '<think>r</think>ok', user 'again'] + generation prompt", multi)

        if name == "qwen2.5.jinja":
            check(
                one == "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                "helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                "<|im_start|>assistant\n",
                "default 'You are Qwen' system prompt, ChatML",
            )
            check("<think>r</think>ok" in multi, "earlier assistant turn kept verbatim (no think handling)")
        elif name == "qwen3.jinja":
            check(one == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "no default system prompt, ChatML")
            check(
                "<think>" not in multi and "r</think>" not in multi and "<|im_start|>assistant\nok<|im_end|>" in multi,
                "earlier assistant turn's <think>r</think> is stripped",
            )
            last = render(tok, MULTI_TURN[:2], add_generation_prompt=False)
            show("[user 'hi', assistant '<think>r</think>ok'] (no generation prompt)", last)
            check(
                last.endswith("<|im_start|>assistant\n<think>\nr\n</think>\n\nok<|im_end|>\n"),
                "assistant turn after the last user query keeps (reformatted) think block",
            )
            rc = render(tok, [ONE_TURN[0], {"role": "assistant", "content": "ok", "reasoning_content": "r"}])
            check(
                rc.endswith("<think>\nr\n</think>\n\nok<|im_end|>\n"),
                "reasoning_content field is rendered as a think block",
            )
            off = render(tok, ONE_TURN, add_generation_prompt=True, enable_thinking=False)
            show("[user 'hi'] + generation prompt, enable_thinking=False", off)
            check(
                off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
                "enable_thinking=False pre-fills an empty think block",
            )
        elif name == "llama3.jinja":
            check(
                one == "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
                "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n",
                "bos + system header with Cutting Knowledge / Today Date (default 26 Jul 2024)",
            )
            dated = render(tok, ONE_TURN, add_generation_prompt=True, date_string="01 Jan 2025")
            check("Today Date: 01 Jan 2025\n" in dated, "date_string kwarg overrides the date")
            check("<think>r</think>ok" in multi, "earlier assistant turn kept verbatim (no think handling)")
        elif name == "smollm2.jinja":
            check(
                one == "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained "
                "by Hugging Face<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                "<|im_start|>assistant\n",
                "default SmolLM system prompt, ChatML",
            )
            check("<think>r</think>ok" in multi, "earlier assistant turn kept verbatim (no think handling)")

        with_tools = render(tok, ONE_TURN, tools=TOOLS, add_generation_prompt=True)
        show("[user 'hi'] + tools=[calc] + generation prompt", with_tools)
        if name not in SUPPORTS_TOOLS:
            check(with_tools == one, "template ignores tools (no tool support)")
            continue
        fn_json = json.dumps(TOOLS[0])
        if name.startswith("qwen"):
            check(f"<tools>\n{fn_json}\n</tools>" in with_tools, "tools listed as JSON in <tools></tools>")
            check(
                '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in with_tools,
                "documents Hermes-style <tool_call> JSON format",
            )
        else:
            check("Environment: ipython\n" in with_tools, "tools switch on 'Environment: ipython'")
            check(json.dumps(TOOLS[0], indent=4) in with_tools, "tools as indented JSON")
            check(
                "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions" in with_tools,
                "tools go into the first user message by default",
            )
            check(
                'Respond in the format {"name": function name, "parameters": dictionary of '
                "argument name and its value}." in with_tools,
                "documents JSON name/parameters format",
            )
            in_sys = render(tok, ONE_TURN, tools=TOOLS, add_generation_prompt=True, tools_in_user_message=False)
            show("[user 'hi'] + tools, tools_in_user_message=False", in_sys)
            check(
                "You have access to the following functions" in in_sys,
                "tools_in_user_message=False puts them in the system message",
            )

        trip = render(tok, TOOL_ROUND_TRIP, tools=TOOLS, add_generation_prompt=True)
        show("tool round trip (assistant tool_call + tool result) + generation prompt", trip)
        if name.startswith("qwen"):
            check(
                '<tool_call>\n{"name": "calc", "arguments": {"expr": "2+2"}}\n</tool_call><|im_end|>' in trip,
                "assistant tool call rendered as <tool_call> JSON",
            )
            check(
                "<|im_start|>user\n<tool_response>\n4\n</tool_response><|im_end|>" in trip,
                "tool result rendered as a user turn in <tool_response>",
            )
        else:
            check(
                '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "calc", '
                '"parameters": {"expr": "2+2"}}<|eot_id|>' in trip,
                "assistant tool call rendered as bare JSON name/parameters",
            )
            # A str is "iterable" to Jinja, so the template's
            # `content is mapping or content is iterable` branch tojson's it:
            # the string result 4 is rendered as the JSON string "4".
            check(
                '<|start_header_id|>ipython<|end_header_id|>\n\n"4"<|eot_id|>' in trip,
                "tool result rendered in an ipython turn, string content JSON-quoted",
            )

    print()
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed:")
        for f in FAILURES:
            print(f"  - {f}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
