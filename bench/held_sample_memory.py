"""What a held long sample costs the learner process (issue 46): its RSS before and after it holds
groups with one 1M-token sample each, read by reference from the bodies bucket.

    OMP_NUM_THREADS=1 python bench/held_sample_memory.py --tokens 1000000 --groups 2
    OMP_NUM_THREADS=1 python bench/held_sample_memory.py --r1-step     # 8,192 samples, mean 4k tokens

A real nats-server (the embedded one, 8 MB max_payload) and a real dry learner process (no
``[learn.engine]``: custody, group assembly and the checks, no optimizer) that holds every group it
receives (``groups_per_step`` is one more than ``--groups``, so no step settles them). Each group is
two samples of a realistic vocabulary's ids (up to 151,936: every id its own Python int), one of
``--tokens`` completion tokens and one of 10; the body is stored and the ScoredGroup published by
reference, as a rollout and a verifier would. After each group is held (the learner's ``held``
heartbeat gauge) the learner's RSS (``VmRSS``) and its peak (``VmHWM``) are read from /proc. Prints
a markdown table and writes it to ``bench/results/held_sample_memory.md``.

``--r1-step``: DeepSeek-R1's step instead (8,192 samples in groups of 16, completion lengths
lognormal with a 4,096-token mean and sigma 0.8, cut at 32,768; prompts of 256 tokens), published
as a rollout and a verifier would (``publish_group``: inline while a group fits, else by
reference), all held at once; writes ``bench/results/held_step_memory.md``. What `rlvr-actor plan`
charges the learner's host memory for held samples (cli/plan/memory.py ``held_samples``) comes
from these two tables.

Not covered: a learner with an engine (its batches and activations: bench/learner_memory.py) and the
feeder's memory (item 2 of issue 46).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import msgspec

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests/ helpers: the same groups the tests send

from rlvr.actors.bodies import message_room, publish_group, store_body  # noqa: E402
from rlvr.cli.natsserver import NatsServer  # noqa: E402
from rlvr.protocol import ScoredGroup, encode  # noqa: E402
from rlvr.protocol.groups import scored_group_msg_id  # noqa: E402
from tests.actors.bodies_helpers import client_bus, long_group, scored  # noqa: E402
from tests.busclient import BusClient  # noqa: E402

VOCAB = 151_936  # Qwen2.5's vocabulary
MIB = 2**20


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _publish(url: str, run: str, task: str, tokens: int) -> int:
    async def go() -> int:
        bus = await client_bus(url, run)
        try:
            group = long_group(run, task, [tokens, 10], vocab=VOCAB)
            ref = await store_body(bus, group)
            whole = scored(group)
            message = ScoredGroup(run, task, [], whole.verdicts, whole.replica, body=ref)
            await bus.publish(bus.names.scored, message, msg_id=scored_group_msg_id(whole))
            return ref.size
        finally:
            await bus.close()

    return anyio.run(go)


def _start_learner(server: NatsServer, tmp: Path, run: str, group_size: int, groups_per_step: int):
    """A dry learner of ``run`` that holds every group it gets (no step completes), once it is running."""
    cfg = tmp / "learn.json"
    cfg.write_bytes(msgspec.json.encode({
        "run": run, "bus": {"heartbeat_every_s": 0.5},
        "learn": {"group_size": group_size, "groups_per_step": groups_per_step, "steps": 1, "max_staleness": 1000,
                  "dynamic_sampling": False, "out_dir": str(tmp / "out")},
    }))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    with open(tmp / "learn.log", "wb") as log:
        learner = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "--role", "learn", "--config", str(cfg),
                                    "--nats", server.url, "--replica", "learn-0"],
                                   stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    bus = BusClient(server.url, run)
    bus.wait_heartbeat(lambda hb: hb.role == "learn" and hb.state == "running", timeout_s=120)
    bus.wait_heartbeat(lambda hb: hb.role == "learn" and hb.counters.get("feeder_issued", 1) >= 0,
                       timeout_s=30)  # a heartbeat later: start-up done
    return learner, bus


def measure(tokens: int, groups: int) -> list[dict]:
    run = "heldmem"
    with tempfile.TemporaryDirectory() as tmp, NatsServer(Path(tmp) / "nats") as server:
        learner, bus = _start_learner(server, Path(tmp), run, 2, groups + 1)
        try:
            rows = [{"groups": 0, "tokens": 0, "body_bytes": 0, "rss": _kib(learner.pid, "VmRSS"),
                     "peak": _kib(learner.pid, "VmHWM")}]
            for k in range(1, groups + 1):
                size = _publish(server.url, run, f"{run}-g{k}", tokens)
                bus.wait_heartbeat(lambda hb, k=k: hb.role == "learn" and hb.gauges.get("held", 0) >= 2 * k,
                                   timeout_s=300)
                rows.append({"groups": k, "tokens": k * (tokens + 10), "body_bytes": size,
                             "rss": _kib(learner.pid, "VmRSS"), "peak": _kib(learner.pid, "VmHWM")})
            return rows
        finally:
            os.killpg(learner.pid, signal.SIGKILL)
            learner.wait()


R1_SAMPLES, R1_GROUP, R1_MEAN, R1_SIGMA, R1_CAP, R1_PROMPT = 8192, 16, 4096, 0.8, 32768, 256


def r1_lengths(seed: int = 0) -> list[int]:
    """Completion lengths of one R1 step: lognormal, mean R1_MEAN, cut at R1_CAP (DeepSeek-R1's RL
    step: 8,192 samples, up to 32,768 tokens; arXiv:2501.12948, section 2.3 and its appendix)."""
    rng = random.Random(seed)
    mu = math.log(R1_MEAN) - R1_SIGMA**2 / 2  # the mean of a lognormal is exp(mu + sigma^2 / 2)
    return [min(R1_CAP, max(1, round(rng.lognormvariate(mu, R1_SIGMA)))) for _ in range(R1_SAMPLES)]


def _publish_step(url: str, run: str, lengths: list[int], upto: int, start: int) -> None:
    """Groups ``start`` to ``upto`` (exclusive) of the step, scored, as a verifier publishes them."""
    async def go() -> None:
        bus = await client_bus(url, run)
        try:
            for g in range(start, upto):
                task = f"{run}-g{g}"
                group = long_group(run, task, lengths[g * R1_GROUP:(g + 1) * R1_GROUP], vocab=VOCAB)
                group.samples[:] = [msgspec.structs.replace(x, prompt_ids=list(range(1000, 1000 + R1_PROMPT)))
                                    for x in group.samples]
                whole = scored(group)
                stored = None
                if len(encode(group)) > message_room(bus) // 2:
                    stored = await store_body(bus, group)
                await publish_group(bus, bus.names.scored, whole, scored_group_msg_id(whole), stored=stored)
        finally:
            await bus.close()

    anyio.run(go)


def measure_r1(points: int = 8) -> tuple[list[dict], list[int]]:
    run, lengths = "heldr1", r1_lengths()
    groups = R1_SAMPLES // R1_GROUP
    with tempfile.TemporaryDirectory() as tmp, NatsServer(Path(tmp) / "nats") as server:
        learner, bus = _start_learner(server, Path(tmp), run, R1_GROUP, groups + 1)
        try:
            rows = [_row(learner.pid, 0, 0, 0)]
            done = 0
            for p in range(1, points + 1):
                upto = groups * p // points
                _publish_step(server.url, run, lengths, upto, done)
                done = upto
                bus.wait_heartbeat(lambda hb, n=done * R1_GROUP: hb.role == "learn" and hb.gauges.get("held", 0) >= n,
                                   timeout_s=600)
                tokens = sum(lengths[:done * R1_GROUP]) + done * R1_GROUP * R1_PROMPT
                rows.append(_row(learner.pid, done * R1_GROUP, tokens, 0))
            return rows, lengths
        finally:
            os.killpg(learner.pid, signal.SIGKILL)
            learner.wait()


def _row(pid: int, count: int, tokens: int, body: int) -> dict:
    return {"groups": count, "tokens": tokens, "body_bytes": body, "rss": _kib(pid, "VmRSS"), "peak": _kib(pid, "VmHWM")}


def r1_table(rows: list[dict], lengths: list[int]) -> str:
    base, last = rows[0], rows[-1]
    per_token = (last["rss"] - base["rss"]) / last["tokens"]
    lines = [
        "# What the learner holds for DeepSeek-R1's step (`bench/held_sample_memory.py --r1-step`)",
        "",
        f"`OMP_NUM_THREADS=1 python bench/held_sample_memory.py --r1-step`, {time.strftime('%Y-%m-%d')}. A dry learner "
        f"process (custody, group assembly, the checks; no optimizer) holding one step of {len(lengths):,} samples "
        f"in groups of {R1_GROUP}: completions lognormal with mean {R1_MEAN:,} and sigma {R1_SIGMA} cut at "
        f"{R1_CAP:,} (here: mean {statistics.mean(lengths):,.0f}, median {statistics.median(lengths):,.0f}, "
        f"max {max(lengths):,}), prompts of {R1_PROMPT} tokens, ids over a {VOCAB:,}-token vocabulary; groups "
        "published as a verifier does (inline while they fit half a message, else by reference).",
        "",
        "| samples held | tokens held | RSS (MiB) | RSS − start (MiB) | bytes per held token | peak RSS (MiB) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        per = f"{(r['rss'] - base['rss']) / r['tokens']:.0f}" if r["tokens"] else "-"
        lines.append(f"| {r['groups']:,} | {r['tokens']:,} | {r['rss'] / MIB:,.0f} | {(r['rss'] - base['rss']) / MIB:,.0f} "
                     f"| {per} | {r['peak'] / MIB:,.0f} |")
    lines += ["", f"The whole step: {last['tokens']:,} tokens held in {(last['rss'] - base['rss']) / MIB:,.0f} MiB above "
              f"the idle learner, {per_token:.0f} bytes per token (token ids and log-probs as Python lists: an int "
              "past 256 and a float are objects of their own)."]
    return "\n".join(lines) + "\n"


def table(rows: list[dict], tokens: int) -> str:
    base = rows[0]["rss"]
    lines = [
        f"# What a held {tokens:,}-token sample costs the learner (`bench/held_sample_memory.py`)",
        "",
        f"`OMP_NUM_THREADS=1 python bench/held_sample_memory.py --tokens {tokens} --groups {len(rows) - 1}`, "
        f"{time.strftime('%Y-%m-%d')}. A dry learner process holding groups of two samples (one of {tokens:,} "
        f"completion tokens, one of 10), ids over a {VOCAB:,}-token vocabulary, read by reference.",
        "",
        "| groups held | tokens held | body (MB) | RSS (MiB) | RSS − start (MiB) | bytes per held token | peak RSS (MiB) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        per = f"{(r['rss'] - base) / r['tokens']:.0f}" if r["tokens"] else "-"
        lines.append(f"| {r['groups']} | {r['tokens']:,} | {r['body_bytes'] / 1e6:.1f} | {r['rss'] / MIB:.0f} | "
                     f"{(r['rss'] - base) / MIB:.0f} | {per} | {r['peak'] / MIB:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--r1-step", action="store_true", help="hold one DeepSeek-R1 step instead (8,192 samples)")
    args = ap.parse_args()
    if args.r1_step:
        text = r1_table(*measure_r1())
        print(text)
        (REPO / "bench" / "results" / "held_step_memory.md").write_text(text)
        return
    text = table(measure(args.tokens, args.groups), args.tokens)
    print(text)
    (REPO / "bench" / "results" / "held_sample_memory.md").write_text(text)


if __name__ == "__main__":
    main()
