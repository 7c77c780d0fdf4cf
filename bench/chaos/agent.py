"""The chaos run's agent: a command agent on the real ``openai`` client (docs/agents.md, "A command").

The rollout replica ``rollout-1`` of the agents scenario (agent_scenario.py) runs it once per
episode. Normally it asks the task's sum (a plain request), then asks again with the model's answer
in its history (a streamed request, so the endpoint extends the episode's transcript) and prints the
second answer.

A fault is switched on from outside, for one episode: the runner writes a mode into
``$CHAOS_DIR/chaos-agent``; the first agent to rename that file to a name of its own (atomic: only
one wins) plays the fault and says so in ``$CHAOS_DIR/claim-<pid>.json`` (mode, episode, pid, its
supervisor's pid). Every other agent plays normally. The modes:

- ``sigkill_mid_request``: waits for ``$CHAOS_DIR/armed-<pid>`` (the runner has held the engine),
  notes ``sent-<pid>`` as its request goes out, and blocks in it until the runner SIGKILLs it;
- ``sigkill_mid_stream``: SIGKILLs itself on the first event of a streamed reply;
- ``disconnect_mid_stream``: closes a streamed reply after its first event and gives up (exit 1);
- ``many_connections``: holds ``IDLE_SOCKETS`` idle TCP connections to the endpoint and
  ``CLIENTS`` SDK clients (each its own connection) listing the models, sends ``PARALLEL`` chat
  requests at once (parallel requests: segments of their own), notes ``opened-<pid>``, waits for
  the runner's ``counted-<pid>``, then exits 3 with all of them open;
- ``wrong_key``: uses another key than its episode's: refused 401, the SDK raises, the agent says
  so and exits 1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

IDLE_SOCKETS = 64
CLIENTS = 32
PARALLEL = 8
ARM_TIMEOUT_S = 30.0


def claim(d: Path, episode: str) -> str:
    """The fault mode this agent won (``""``: none was asked for, or another agent won it)."""
    mine = d / f"claimed-{os.getpid()}"
    try:
        os.rename(d / "chaos-agent", mine)
    except FileNotFoundError:
        return ""
    mode = mine.read_text().strip()
    mine.unlink()
    note = d / f"claim-{os.getpid()}.json.tmp"
    note.write_text(json.dumps({"mode": mode, "episode": episode, "pid": os.getpid(), "ppid": os.getppid()}))
    note.rename(d / f"claim-{os.getpid()}.json")
    return mode


def main() -> int:
    task = json.load(sys.stdin)
    import openai  # after reading the task: its import is most of this agent's start-up

    d = Path(os.environ["CHAOS_DIR"])
    messages = list(task["messages"])
    mode = claim(d, task["episode_id"])
    pid = os.getpid()
    if mode == "wrong_key":
        client = openai.OpenAI(api_key="rlvr-not-this-episodes-key", max_retries=0)
        try:
            client.chat.completions.create(model=task["model"], messages=messages)
        except openai.AuthenticationError as e:
            print(f"chaos: the endpoint refused the key: {e.status_code} {e.message}"[:300], file=sys.stderr)
            return 1
        print("chaos: the endpoint served a wrong key", file=sys.stderr)
        return 4
    if mode == "sigkill_mid_request":
        deadline = time.monotonic() + ARM_TIMEOUT_S
        while not (d / f"armed-{pid}").exists():
            if time.monotonic() > deadline:
                print("chaos: the runner never armed the engine hold", file=sys.stderr)
                return 4
            time.sleep(0.05)

        def sent(request) -> None:
            (d / f"sent-{pid}").touch()

        client = openai.OpenAI(max_retries=0, http_client=openai.DefaultHttpxClient(event_hooks={"request": [sent]}))
        client.chat.completions.create(model=task["model"], messages=messages)
        print("chaos: the request came back, the runner should have killed this agent", file=sys.stderr)
        return 4
    if mode == "many_connections":
        return many_connections(openai, task, messages, d)
    client = openai.OpenAI(max_retries=0)
    first = client.chat.completions.create(model=task["model"], messages=messages).choices[0].message.content
    messages += [{"role": "assistant", "content": first or ""}, {"role": "user", "content": "Once more."}]
    stream = client.chat.completions.create(model=task["model"], messages=messages, stream=True)
    if mode == "sigkill_mid_stream":
        next(iter(stream))
        os.kill(pid, signal.SIGKILL)
    if mode == "disconnect_mid_stream":
        next(iter(stream))
        stream.close()
        print("chaos: the client disconnected mid-stream and gave up", file=sys.stderr)
        return 1
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    print(text.strip() or "?")
    return 0


def many_connections(openai, task: dict, messages: list[dict], d: Path) -> int:
    url = urlparse(os.environ["OPENAI_BASE_URL"])
    idle = [socket.create_connection((url.hostname, url.port), timeout=10) for _ in range(IDLE_SOCKETS)]
    clients = [openai.OpenAI(max_retries=0) for _ in range(CLIENTS)]
    errors: list[str] = []

    def call(fn) -> None:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 (counted, reported on stderr)
            errors.append(f"{type(e).__name__}: {e}"[:200])

    calls = [lambda c=c: c.models.list() for c in clients]
    calls += [lambda c=c: c.chat.completions.create(model=task["model"], messages=messages)
              for c in clients[:PARALLEL]]
    threads = [threading.Thread(target=call, args=(fn,)) for fn in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Every connection is open: let the runner count them on the replica's side before giving up.
    (d / f"opened-{os.getpid()}").touch()
    deadline = time.monotonic() + ARM_TIMEOUT_S
    while not (d / f"counted-{os.getpid()}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"chaos: {len(idle)} idle connections and {len(clients)} clients open, {len(errors)} calls failed "
          f"{errors[:2]}; giving up with all of them open", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())
