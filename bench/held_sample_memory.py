"""What a held long sample costs the learner process (issue 46): its RSS before and after it holds
groups with one 1M-token sample each, read by reference from the bodies bucket.

    OMP_NUM_THREADS=1 python bench/held_sample_memory.py --tokens 1000000 --groups 2

A real nats-server (the embedded one, 8 MB max_payload) and a real dry learner process (no
``[learn.engine]``: custody, group assembly and the checks, no optimizer) that holds every group it
receives (``groups_per_step`` is one more than ``--groups``, so no step settles them). Each group is
two samples of a realistic vocabulary's ids (up to 151,936: every id its own Python int), one of
``--tokens`` completion tokens and one of 10; the body is stored and the ScoredGroup published by
reference, as a rollout and a verifier would. After each group is held (the learner's ``held``
heartbeat gauge) the learner's RSS (``VmRSS``) and its peak (``VmHWM``) are read from /proc. Prints
a markdown table and writes it to ``bench/results/held_sample_memory.md``.

Not covered: a learner with an engine (its batches and activations: bench/learner_memory.py) and the
feeder's memory (item 2 of issue 46).
"""

from __future__ import annotations

import argparse
import os
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

from rlvr.actors.bodies import store_body  # noqa: E402
from rlvr.cli.natsserver import NatsServer  # noqa: E402
from rlvr.protocol import ScoredGroup  # noqa: E402
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


def measure(tokens: int, groups: int) -> list[dict]:
    run = "heldmem"
    with tempfile.TemporaryDirectory() as tmp, NatsServer(Path(tmp) / "nats") as server:
        cfg = Path(tmp) / "learn.json"
        cfg.write_bytes(msgspec.json.encode({
            "run": run, "bus": {"heartbeat_every_s": 0.5},
            "learn": {"group_size": 2, "groups_per_step": groups + 1, "steps": 1, "max_staleness": 1000,
                      "dynamic_sampling": False, "out_dir": str(Path(tmp) / "out")},
        }))
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
        with open(Path(tmp) / "learn.log", "wb") as log:
            learner = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "--role", "learn", "--config", str(cfg),
                                        "--nats", server.url, "--replica", "learn-0"],
                                       stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            bus = BusClient(server.url, run)
            bus.wait_heartbeat(lambda hb: hb.role == "learn" and hb.state == "running", timeout_s=120)
            bus.wait_heartbeat(lambda hb: hb.role == "learn" and hb.counters.get("feeder_issued", 1) >= 0,
                               timeout_s=30)  # a heartbeat later: start-up done
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
    args = ap.parse_args()
    text = table(measure(args.tokens, args.groups), args.tokens)
    print(text)
    (REPO / "bench" / "results" / "held_sample_memory.md").write_text(text)


if __name__ == "__main__":
    main()
