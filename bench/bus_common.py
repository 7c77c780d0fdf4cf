"""Shared parts of the bus-hop benchmark (bench/bus_hop.py): its messages, its raw relay, its CPU clock.

- ``groups``: real ``rlvr.protocol`` Samples of two sizes, in group messages
  of ``GROUP`` (``SampleGroup``, as ROLLOUTS carries them: protocol/groups.py),
  encoded, each with its ``Nats-Msg-Id`` and a ``traceparent`` (the upstream's
  head-sampling decision in its flags, as a rollout would forward it);
- ``relay``: the verify hop in plain nats-py, with the guarantees the project
  keeps: pull from the run's durable ``verify`` consumer with at most
  ``window`` messages in hand (fetching when half the window is free), score
  each sample with the ``exact`` verifier's own function, publish one
  ``ScoredGroup`` per group with ``Nats-Msg-Id`` = ``scored_group_msg_id``, and
  ack each input only after its output's PubAck (a failed publish naks it). It
  skips what the project does on top: ``check_sample_group``, the
  duplicate-content check, the worker pool, tracing, in_progress keep-alives
  and dead letters;
- ``tree_cpu_s``: user + system CPU seconds of process trees, from /proc.

Not here: starting nats-server or roles, timing, reporting (bus_hop.py).
"""

from __future__ import annotations

import asyncio
import random
import signal

import msgspec

from rlvr.protocol import (Completion, RunNames, Sample, SampleGroup, SamplingParams, ScoredGroup, VerifierSpec, decode,
                           encode)
from rlvr.protocol.codec import MessageDecodeError
from rlvr.protocol.groups import scored_group_msg_id
from rlvr.verify.simple import ExactParams, score_exact
from verify_scaling import tree_cpu_s  # noqa: F401 (re-exported; bench/ is sys.path[0])

SIZES = ("small", "realistic")
GROUP = 8  # samples per task's group: one message on ROLLOUTS and one on SCORED


def make_sample(run: str, tag: str, i: int, size: str, rng: random.Random, group_size: int = GROUP) -> Sample:
    """One valid Sample, member ``i % group_size`` of task ``i // GROUP``: ``small`` a 2-token answer,
    ``realistic`` 512 completion tokens with their log-probs and ~2,000 characters of text."""
    if size == "small":
        prompt, ids, lps = [1, 2, 3, 4, 5, 6, 7, 8], [17, 2], [-0.25, -0.01]
        text, params = "42", {"gold": "42"}
    elif size == "realistic":
        prompt = [rng.randrange(151_000) for _ in range(128)]
        ids = [rng.randrange(151_000) for _ in range(512)]
        lps = [-rng.random() * 5 for _ in range(512)]
        text, params = "Let me add these step by step. " * 64 + "#### 42", {"gold": "42", "after": "####"}
    else:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    task = f"{tag}-{i // GROUP}"
    return Sample(
        run=run, task_id=task, sample_index=i % GROUP, group_id=task, group_size=group_size, prompt_ids=prompt,
        completion=Completion(ids=ids, logprobs=lps), text=text, finish_reason="stop",
        policy_version=0, policy_version_max=0, verifier=VerifierSpec("exact", params),
        sampling=SamplingParams(max_tokens=512), replica="bench",
    )


def groups(run: str, tag: str, n: int, size: str, sampled_ratio: float = 1.0, seed: int = 0):
    """``n`` Samples in encoded group messages of ``GROUP`` (the last one smaller when ``GROUP`` does
    not divide ``n``: a task of fewer samples) as ``(data, headers)``; ``tag`` makes the ids unique
    per repeat.

    Each carries a fresh trace (a rollout forwards its task's trace): its
    ``traceparent`` flags say "sampled" for a ``sampled_ratio`` share, as the
    feeder's head sampling would have decided upstream."""
    rng = random.Random(seed)
    out = []
    for first in range(0, n, GROUP):
        size_of = min(GROUP, n - first)
        members = [make_sample(run, tag, first + i, size, rng, size_of) for i in range(size_of)]
        g = SampleGroup(run, members[0].task_id, members)
        flags = "01" if rng.random() < sampled_ratio else "00"
        traceparent = f"00-{rng.getrandbits(128) | 1:032x}-{rng.getrandbits(64) | 1:016x}-{flags}"
        out.append((encode(g), {"Nats-Msg-Id": g.msg_id, "traceparent": traceparent}))
    return out


def _score(group: SampleGroup) -> ScoredGroup:
    verdicts = [score_exact(s.text, msgspec.convert(s.verifier.params, ExactParams), None) for s in group.samples]
    return ScoredGroup(group.run, group.task_id, group.samples, verdicts, replica="raw-relay")  # type: ignore[arg-type]


async def relay(url: str, run: str, window: int) -> None:
    """The raw verify hop, until SIGTERM. Prints ``ready`` once bound to the consumer."""
    import nats
    from nats.errors import TimeoutError as NatsTimeoutError

    names = RunNames(run)
    nc = await nats.connect(url, name=f"raw-relay-{run}")
    js = nc.jetstream(timeout=10)
    sub = await js.pull_subscribe_bind(durable="verify", stream=names.stream("ROLLOUTS"))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    pending: asyncio.Queue = asyncio.Queue()  # (PubAck future, input), in publish order
    room = asyncio.Event()
    room.set()
    in_hand = 0

    async def settle() -> None:
        nonlocal in_hand
        while True:
            fut, msg = await pending.get()
            try:
                await fut
            except Exception:  # no PubAck: the input goes back, never acked
                await msg.nak()
            else:
                await msg.ack()
            in_hand -= 1
            if in_hand <= window // 2:
                room.set()

    settler = asyncio.create_task(settle())
    print("ready", flush=True)
    try:
        while True:
            await room.wait()
            try:
                msgs = await sub.fetch(batch=window - in_hand, timeout=1)
            except (NatsTimeoutError, asyncio.TimeoutError):
                continue
            for msg in msgs:
                try:
                    scored = _score(decode(msg.data, SampleGroup))
                except (MessageDecodeError, msgspec.ValidationError) as e:
                    print(f"refused: {e}", flush=True)
                    await msg.term()
                    continue
                headers = {"Nats-Msg-Id": scored_group_msg_id(scored)}
                if tp := (msg.headers or {}).get("traceparent"):
                    headers["traceparent"] = tp
                fut = await js.publish_async(names.scored, encode(scored), headers=headers)
                in_hand += 1
                pending.put_nowait((fut, msg))
            if in_hand > window // 2:
                room.clear()
    except asyncio.CancelledError:
        pass  # SIGTERM
    finally:
        settler.cancel()
        await nc.close()
