"""A calculator agent: a black box written only against the ``openai`` SDK, with one function tool.

It is what a user brings (docs/agents.md, "Train your agent"): a loop on the SDK
that offers the model one tool, answers the model's calls, and returns the
model's final answer. rlvr-actor trains the model behind the endpoint the agent
talks to; the agent itself is never changed.

- As a callable (examples/agent_calc.toml: ``callable = "calc_agent:solve"``):
  ``solve(client, task)`` gets the endpoint's URL and the episode's key in
  ``client`` and the task (its prompt messages) in ``task``.
- As a command (``command = ["python", "examples/agent_calc/calc_agent.py"]``):
  the SDK reads ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` from the environment,
  the task comes on stdin, the answer goes to stdout.

The task: a 2-digit product such as "37*04=". The tool, ``calculator``, takes no
arguments (the model it is trained for, a character model, cannot spell any)
and evaluates the problem's expression, answering "1480=". The agent allows one
call; the model's next reply is the answer.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import sys
from typing import Any

from openai import AsyncOpenAI, DefaultAsyncHttpxClient

# One TLS context for every episode's client. An SDK client made without one loads the CA store
# itself: about 35 ms of CPU, more than the rest of a short episode (docs/agents.md, "Cost").
_TLS = ssl.create_default_context()

TOOLS = [{"type": "function", "function": {
    "name": "calculator",
    "description": "Evaluate the problem's arithmetic expression. Answers '<value>='.",
    "parameters": {"type": "object", "properties": {}},
}}]
_EXPRESSION = re.compile(r"^\s*(-?\d+)\s*([+\-*])\s*(-?\d+)\s*=?\s*$")


def calculator(problem: str) -> str:
    """The tool: the problem's value and "=", or an error the model reads."""
    m = _EXPRESSION.match(problem)
    if m is None:
        return "error: not a two-operand expression"
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    return f"{a + b if op == '+' else a - b if op == '-' else a * b}="


async def run(client: AsyncOpenAI, model: str, messages: list[dict[str, Any]]) -> str:
    """The agent's loop: ask, answer one calculator call, ask again; the last reply's text is the answer."""
    problem = messages[-1]["content"]
    messages = list(messages)
    for _ in range(2):
        reply = await client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        msg = reply.choices[0].message
        if not msg.tool_calls:
            return (msg.content or "").strip()
        messages.append(msg.model_dump(exclude_none=True))
        for call in msg.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": calculator(problem)})
    return ""  # it asked twice: no answer


async def solve(client: Any, task: dict[str, Any]) -> str:
    """The callable form: (client, task) -> answer."""
    oa = AsyncOpenAI(base_url=client.openai_base_url, api_key=client.api_key, max_retries=0,
                     http_client=DefaultAsyncHttpxClient(verify=_TLS))
    try:
        return await run(oa, client.model, task["messages"])
    finally:
        await oa.close()


async def _main() -> None:
    task = json.load(sys.stdin)
    async with AsyncOpenAI(max_retries=0) as oa:  # OPENAI_BASE_URL, OPENAI_API_KEY from the environment
        print(await run(oa, task["model"], task["messages"]))


if __name__ == "__main__":
    asyncio.run(_main())
