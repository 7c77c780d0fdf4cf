"""Agent programs the runner tests start, as users write them: only the ``openai`` or ``anthropic`` SDK and the
documented environment (OPENAI_BASE_URL, OPENAI_API_KEY, ANTHROPIC_*, RLVR_TASK_FILE, the task on stdin).

Each writes what the endpoint returned to it (the log-probs of each turn) to the file ``AGENT_OUT`` names, so a
test can compare the recorded tokens with what the agent saw, and prints its answer as the last line of stdout."""

from __future__ import annotations

from pathlib import Path

OPENAI_TOOLS = ('[{"type": "function", "function": {"name": "add", "description": "Add two numbers.", "parameters": '
                '{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, '
                '"required": ["a", "b"]}}}]')

# Sync client, with a tool: a plain request, then a streamed one; tool calls are answered, anything else is
# followed by a question of the agent's own.
OPENAI_SYNC = f'''
import json, os, sys
import openai
task = json.load(sys.stdin)
assert task == json.load(open(os.environ["RLVR_TASK_FILE"]))
client = openai.OpenAI(max_retries=0)
tools = json.loads({OPENAI_TOOLS!r})
messages = list(task["messages"])
got = []
for k, stream in enumerate([False, True]):
    kw = dict(model=os.environ["RLVR_MODEL"], messages=messages, tools=tools, logprobs=True, temperature=0.3)
    if stream:
        text, lps = "", []
        for chunk in client.chat.completions.create(stream=True, **kw):
            c = chunk.choices[0]
            text += c.delta.content or ""
            lps += [t.logprob for t in (c.logprobs.content if c.logprobs else None) or []]
        got.append(lps)
        messages.append({{"role": "assistant", "content": text}})
    else:
        r = client.chat.completions.create(**kw)
        got.append([t.logprob for t in r.choices[0].logprobs.content])
        msg = r.choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        for call in msg.tool_calls or []:
            messages.append({{"role": "tool", "tool_call_id": call.id, "content": "RESULT"}})
    messages.append({{"role": "user", "content": f"Check again {{k}}."}})
json.dump(got, open(os.environ["AGENT_OUT"], "w"))
print("thinking out loud")
print(json.dumps({{"answer": "forty-two", "reward": 0.25}}))
'''

# Async client: a streamed request, then a plain one.
OPENAI_ASYNC = f'''
import asyncio, json, os, sys
import openai

async def main():
    task = json.loads(sys.stdin.read())
    client = openai.AsyncOpenAI(max_retries=0)
    tools = json.loads({OPENAI_TOOLS!r})
    messages, got = list(task["messages"]), []
    for k, stream in enumerate([True, False]):
        kw = dict(model="any-name", messages=messages, tools=tools, logprobs=True, max_tokens=999)
        if stream:
            text, lps = "", []
            async for chunk in await client.chat.completions.create(stream=True, **kw):
                c = chunk.choices[0]
                text += c.delta.content or ""
                lps += [t.logprob for t in (c.logprobs.content if c.logprobs else None) or []]
            got.append(lps)
            messages.append({{"role": "assistant", "content": text}})
        else:
            r = await client.chat.completions.create(**kw)
            got.append([t.logprob for t in r.choices[0].logprobs.content])
            messages.append(r.choices[0].message.model_dump(exclude_none=True))
        messages.append({{"role": "user", "content": f"Check again {{k}}."}})
    json.dump(got, open(os.environ["AGENT_OUT"], "w"))
    print("7")

asyncio.run(main())
'''

# Anthropic's client, with a tool: a plain request, then a streamed one.
ANTHROPIC = '''
import json, os, sys
import anthropic
task = json.load(open(os.environ["RLVR_TASK_FILE"]))
client = anthropic.Anthropic(max_retries=0)
tools = [{"name": "add", "description": "Add two numbers.", "input_schema": {"type": "object", "properties":
         {"a": {"type": "integer"}, "b": {"type": "integer"}}}}]
messages = [{"role": m["role"], "content": m["content"]} for m in task["messages"] if m["role"] != "system"]
for k, stream in enumerate([False, True]):
    kw = dict(model="claude-x", max_tokens=1024, system="You add.", messages=messages, tools=tools)
    if stream:
        with client.messages.stream(**kw) as s:
            msg = s.get_final_message()
    else:
        msg = client.messages.create(**kw)
    messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]
                     or [{"type": "text", "text": ""}]})
    results = [{"type": "tool_result", "tool_use_id": b.id, "content": "RESULT"} for b in msg.content
               if b.type == "tool_use"]
    messages.append({"role": "user", "content": results + [{"type": "text", "text": f"Check again {k}."}]})
open(os.environ["AGENT_OUT"], "w").write("[]")
print("8")
'''

def hanging_agent(kind: str) -> str:
    """An agent that forks a daemon (its own session: it escapes the agent's process group) and a child in its
    group, writes their pids to AGENT_OUT, and then hangs (``kind = "hang"``), crashes (``"crash"``: exit 3 with
    a message on stderr) or keeps asking the model after a limit refused it (``"loop"``)."""
    tail = {
        "hang": "time.sleep(1000)",
        "crash": "sys.stderr.write('boom: the agent broke\\n'); sys.exit(3)",
        "loop": ("import openai\nc = openai.OpenAI(max_retries=0)\nwhile True:\n    try:\n"
                 "        c.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'hi'}])\n"
                 "    except openai.APIStatusError:\n        time.sleep(0.05)"),
    }[kind]
    return f'''
import os, subprocess, sys, time
r, w = os.pipe()
daemon = os.fork()
if daemon == 0:
    os.setsid()
    grandchild = os.fork()
    if grandchild:
        os.write(w, (str(grandchild) + "\\n").encode())
        os._exit(0)
    time.sleep(1000)
    os._exit(0)
os.waitpid(daemon, 0)
escaped = int(os.read(r, 64).decode().strip())
grouped = subprocess.Popen(["sleep", "1000"]).pid
open(os.environ["AGENT_OUT"], "w").write(f"{{os.getpid()}} {{escaped}} {{grouped}}")
{tail}
'''


def write(directory: Path, name: str, source: str) -> Path:
    path = directory / name
    path.write_text(source)
    return path
