"""What the agent endpoint adds to each request: HTTP, decoding, the chat template, matching, the response.

The engine answers at once (a fixed turn of ``--turn-tokens`` tokens), so the figure is the endpoint's own
cost per request, as the conversation grows: one agent (the official ``openai`` client, keep-alive, not
streaming) sends ``--turns`` requests, each the whole history plus a user message of ``--user-chars``
characters, and each extends the episode's segment. Reported: the median wall ms per request over the
first and the last ``--window`` turns, the tokens in the segment at the end, and the CPU ms per request
of this process, which runs both the client and the endpoint (an upper bound on the endpoint's).

    python bench/agent_endpoint.py --turns 60 --window 10

The tokenizer and chat template are the tiny model's (rlvr.learner.example.tiny_model), built in a
temporary folder. It does not measure generation (see bench/rollout_overhead.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class _InstantEngine:
    def __init__(self, tokenizer, n_tokens: int) -> None:
        from rlvr.rollout.transcript import HFChatCodec

        self.codec, self.weights_version = HFChatCodec(tokenizer), 0
        self.ids = tokenizer("The answer is 5. " * 8, add_special_tokens=False)["input_ids"][: n_tokens - 1] + [
            tokenizer.convert_tokens_to_ids("<|im_end|>")]
        self.text = tokenizer.decode(self.ids[:-1])

    def chat_codec(self):
        return self.codec

    async def generate_ids(self, prompt_ids, n, sampling):
        from rlvr.rollout.engines.base import Generation, GroupResult

        return GroupResult(list(prompt_ids), [Generation(self.ids, [-0.5] * len(self.ids), self.text, "stop")], 0, 0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=60)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--turn-tokens", type=int, default=32)
    ap.add_argument("--user-chars", type=int, default=200)
    args = ap.parse_args()

    import openai
    from transformers import AutoTokenizer

    from rlvr.learner.example.tiny_model import build_tiny_model
    from rlvr.protocol import SamplingParams
    from rlvr.rollout.agents.endpoint import AgentEndpoint
    from rlvr.rollout.agents.session import AgentLimits

    model = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny", seed=0)
    engine = _InstantEngine(AutoTokenizer.from_pretrained(model), args.turn_tokens)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    ep = AgentEndpoint(engine, sampling=SamplingParams(max_tokens=64), tool_format="hermes")
    asyncio.run_coroutine_threadsafe(ep.start(), loop).result(30)
    session = ep.open("bench", AgentLimits(max_requests=args.turns, max_tokens=10**9))
    client = openai.OpenAI(base_url=ep.base_url + "/v1", api_key=session.key, max_retries=0)
    history = [{"role": "system", "content": "You add."}]
    wall = []
    cpu0 = time.process_time()
    for k in range(args.turns):
        history.append({"role": "user", "content": (f"Step {k}: " + "add two numbers " * 20)[: args.user_chars]})
        t = time.perf_counter()
        r = client.chat.completions.create(model="m", messages=history)
        wall.append((time.perf_counter() - t) * 1e3)
        history.append({"role": "assistant", "content": r.choices[0].message.content})
    cpu = (time.process_time() - cpu0) * 1e3 / args.turns
    out = session.outcome()
    assert out.episode.segment_count == 1, "every request should extend the one segment"
    print(json.dumps({
        "turns": args.turns, "segment_tokens": len(out.prompt_ids) + len(out.completion.ids),
        "first_ms_median": round(statistics.median(wall[: args.window]), 2),
        "last_ms_median": round(statistics.median(wall[-args.window:]), 2),
        "cpu_ms_per_request_with_client": round(cpu, 2),
    }))
    asyncio.run_coroutine_threadsafe(ep.stop(), loop).result(30)


if __name__ == "__main__":
    main()
