"""Seconds per weight sync by transport: the collective (gloo or nccl) against object_store and path.

One learner side (this process: a real nats-server, the real ``publish_weights`` or
``CollectiveHost``) and one replica process per transport (tests/rollout/collective_replica.py:
the real ``WeightsWatcher`` and ``hf`` engine). For each of ``--repeats`` versions (a
fresh random perturbation of a locally built model) it records the seconds from the
start of the publish (after the export: every transport starts from the same folder; the
collective from its tensors in memory, read before the clock starts)
to the replica's ``weights_loaded`` log line (same machine, same clock): announcement,
transfer, checks and the engine's load, end to end.

    python bench/weights_collective.py                      # gloo, object_store, path on CPU
    python bench/weights_collective.py --transports nccl --device cuda   # bench/gpu_check.sh, on a GPU

It writes one JSON line to ``bench/results/weights_collective.jsonl`` (medians).
Not covered: several replicas at once, DeepSpeed's export (the same for every transport).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parents[1]
RUN = "wbench"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _versions(model: Path, root: Path, n: int) -> list[tuple[Path, list[tuple[str, str, int]]]]:
    import torch
    from safetensors.torch import load_file, save_file

    base = load_file(model / "model.safetensors")
    if "lm_head.weight" not in base:
        base["lm_head.weight"] = base["model.embed_tokens.weight"].clone()
    out = []
    g = torch.Generator().manual_seed(0)
    for v in range(1, n + 1):
        state = {k: t + 0.01 * torch.randn(t.shape, generator=g) for k, t in base.items()}
        state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
        d = root / f"v{v}"
        d.mkdir(parents=True)
        save_file(state, d / "model.safetensors")
        data = (d / "model.safetensors").read_bytes()
        out.append((d, [("model.safetensors", hashlib.sha256(data).hexdigest(), len(data))]))
    return out


def _loaded_at(log: Path, version: int) -> float | None:
    for line in log.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("event") == "weights_loaded" and rec.get("version") == version:
            return dt.datetime.fromisoformat(rec["timestamp"].replace("Z", "+00:00")).timestamp()
    return None


async def _until(pred, timeout_s: float, what: str):
    with anyio.fail_after(timeout_s):
        while not (v := pred()):
            await anyio.sleep(0.01)
    return v


async def _bench(transport: str, args, url: str, model: Path, versions, work: Path) -> list[float]:
    from rlvr.actors.bus import Bus
    from rlvr.actors.config import BusConfig, NatsConfig
    from rlvr.learner.weights.collective import CollectiveHost
    from rlvr.learner.config import CollectiveConfig
    from rlvr.learner.weights.publish import publish_weights
    from rlvr.learner.weights.snapshot import ExportPlan, Snapshot
    from rlvr.protocol import RunNames
    from safetensors.torch import load_file

    out = work / f"replica-{transport}"
    out.mkdir()
    port = _free_port()
    backend = transport if transport in ("gloo", "nccl") else ""
    coll = {"timeout_s": 60.0, "address": f"127.0.0.1:{port}"} if backend else {"join": False}
    if backend == "nccl":
        coll["device"] = args.replica_device
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    log = out / "log.jsonl"
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "tests/rollout/collective_replica.py"), "--nats", url, "--run", RUN,
             "--replica", f"bench-{transport}", "--model", str(model), "--out", str(out),
             "--until", str(len(versions)), "--collective", json.dumps(coll)],
            stdout=f, stderr=subprocess.STDOUT, env=env,
        )
    times: list[float] = []
    bus = await Bus.connect(NatsConfig(url=url), BusConfig(), RunNames(RUN), "bench-learner")
    try:
        await bus.ensure_topology()
        async with anyio.create_task_group() as tg:
            host = None
            if backend:
                host = CollectiveHost(CollectiveConfig(backend=backend, address=f"127.0.0.1:{port}",
                                                       timeout_s=60.0, device=args.device))
                await tg.start(host.run, bus)
                await _until(lambda: host.members, 120, "the replica joined")
            else:
                await _until(lambda: (out / "ready").exists(), 120, "the replica subscribed")
            for i, (directory, files) in enumerate(versions, start=1):
                v = args.base_version + i
                # The collective's tensors in memory, as the trainer hands them over (read untimed).
                state = dict(sorted(load_file(directory / "model.safetensors").items())) if host else {}
                t0 = time.time()
                if host is not None:
                    await host.publish(Snapshot(v, v, True, state, ExportPlan(work / f"exports-{transport}")))
                else:
                    await publish_weights(bus, directory, files, version=v, step=v, dtype="fp32",
                                          tied_embeddings=True, transport=transport)
                t1 = await _until(lambda v=v: _loaded_at(log, v), 300, f"v{v} loaded")
                times.append(t1 - t0)
                await _until(lambda v=v: (out / f"v{v}.safetensors").exists() or proc.poll() is not None, 300,
                             "the replica done with it")
            if host is not None:
                host.stop()
            tg.cancel_scope.cancel()
    finally:
        await bus.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--transports", default="gloo,object_store,path")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="", help="learner's staging device for nccl (default cuda)")
    p.add_argument("--replica-device", default="cuda", help="replica's device for nccl")
    p.add_argument("--out", default=str(REPO / "bench/results/weights_collective.jsonl"))
    args = p.parse_args()
    args.base_version = 0
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    from rlvr.cli.natsserver import NatsServer
    from rlvr.learner.example.tiny_model import build_tiny_model

    with tempfile.TemporaryDirectory(prefix="wbench-") as tmp:
        work = Path(tmp)
        model = build_tiny_model(work / "model", hidden=args.hidden, layers=args.layers, heads=max(1, args.hidden // 64))
        versions = _versions(model, work / "exports", args.repeats)
        size = versions[0][1][0][2]
        result: dict = {"bench": "weights_collective", "bytes": size, "hidden": args.hidden, "layers": args.layers,
                        "repeats": args.repeats, "replicas": 1, "threads": int(os.environ["OMP_NUM_THREADS"]),
                        "median_s": {}, "all_s": {}}
        for transport in args.transports.split(","):
            with NatsServer(work / f"nats-{transport}") as server:
                times = anyio.run(_bench, transport, args, server.url, model, versions, work)
            result["median_s"][transport] = round(statistics.median(times), 4)
            result["all_s"][transport] = [round(t, 4) for t in times]
            print(transport, result["median_s"][transport], "s per sync", flush=True)
    line = json.dumps(result)
    print(line)
    with open(args.out, "a") as f:
        f.write(line + "\n")


if __name__ == "__main__":
    main()
