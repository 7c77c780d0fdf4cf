"""A weight sync the way a run does it: what the learner's loop waits for (the step record's
``publish_s``) and the rollout's reload, by export folder (A: ``weights_transport = "path"``) against
tensors in memory (B: ``"nccl"``, the collective; gloo on CPU).

    OMP_NUM_THREADS=1 python bench/weights_sync.py        # SmolLM2 (examples/smollm2.toml), 3 rounds
    python bench/weights_sync.py --config examples/gpu_qwen.toml --model DIR   # bench/gpu_check.sh

The learner's side runs in this process: the real ``Trainer`` (DeepSpeed, the config's
``[learn.engine]``) and its ``publish`` as the learner actor calls it, on a real nats-server, with
the real ``CollectiveHost`` for B. Each transport has one rollout replica, a process of its own on
its own run: the real ``WeightsWatcher`` and the config's engine (vLLM for SmolLM2). Before each
version the learner's parameters move by a little noise, as a step would move them (no step is
timed). A and B alternate, the order swapped every round; one untimed round each comes first.

Per version: ``publish_s`` (``Trainer.publish``: what the loop waits for), the replica's ``fetch_s``
(A: the files' sha256; B: the broadcast received, ``receive_s``, and its digest checked,
``digest_s``), its ``load_s`` (the
engine's load: the replica's ``weights_load_s`` gauge), and ``e2e_s`` (publish start to the
replica's ``weights_loaded`` line, one clock), each with the 1-minute load average at the time.
Prints them and appends one JSON line (medians and every value) to ``--out``.

Not covered: a training step's own time, several replicas, the object-store transport
(bench/weights_collective.py compares the transports on a tiny model).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parents[1]
TRANSPORTS = ("path", "nccl")  # A, B
LABEL = {"path": "A path (export folder)", "nccl": "B collective (in memory)"}
SEVEN_B_BYTES = int(7.6e9) * 2  # a 7B model (Qwen2.5-7B: 7.6e9 parameters) in bf16


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sections(config: Path, model: str) -> tuple[dict, dict]:
    """The config's ``[rollout.engine]`` and ``[learn.engine]``, both pointed at ``model`` when given."""
    import msgspec

    raw = msgspec.toml.decode(config.read_bytes())
    rollout, learn = dict(raw["rollout"]["engine"]), dict(raw["learn"]["engine"])
    if model:
        rollout["model"], learn["model_path"] = model, model
    for d in (rollout, learn):  # relative to the repository, as `up` is run from it
        key = "model" if "model" in d else "model_path"
        if not Path(d[key]).is_absolute():
            d[key] = str(REPO / d[key])
    return rollout, learn


# --- a replica (a process of its own) -------------------------------------------------------
class _Ctx:
    def __init__(self, replica: str) -> None:
        self.replica = replica


class _Actor:
    """The parts of RolloutActor the watcher reads (generation is not benched here)."""

    def __init__(self, engine, replica: str) -> None:
        self.engine, self.ctx = engine, _Ctx(replica)
        self.weights_fetch_s = self.weights_load_s = 0.0

    @property
    def version(self) -> int:
        return self.engine.weights_version

    def abort_in_flight(self) -> int:
        return 0


async def _replica(a: argparse.Namespace) -> None:
    import msgspec

    from rlvr.actors.bus import Bus
    from rlvr.actors.config import BusConfig, NatsConfig
    from rlvr.actors.logs import configure_logging
    from rlvr.protocol import RunNames
    from rlvr.rollout.config import RolloutCollectiveConfig, RolloutConfig
    from rlvr.rollout.engines.base import GenerationEngineConfig, make_engine
    from rlvr.rollout.weights_sync import WeightsWatcher

    configure_logging(run=a.run, role="rollout", replica=a.run, fmt="json", level="info")
    out = Path(a.out)
    engine_cfg = msgspec.convert(json.loads(a.engine), GenerationEngineConfig)
    collective = RolloutCollectiveConfig(address=a.address, timeout_s=120.0, device=a.replica_device)
    cfg = RolloutConfig(engine=engine_cfg, weights_cache_dir=str(out / "cache"), collective=collective)
    engine = make_engine(engine_cfg)
    await engine.start()
    bus = await Bus.connect(NatsConfig(url=a.nats), BusConfig(), RunNames(a.run), a.run)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(WeightsWatcher(bus, _Actor(engine, a.run), cfg).run)
            (out / "ready").write_text("1")
            while not (out / "stop").exists():
                await anyio.sleep(0.2)  # the bench's stop file: this process's own exit condition
            tg.cancel_scope.cancel()
    finally:
        await bus.close()
        await engine.close()


# --- the learner's side (this process) ------------------------------------------------------
def _loaded(log: Path, version: int) -> dict | None:
    """The replica's ``weights_loaded`` record of ``version``, its timestamp as seconds."""
    for line in log.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("event") == "weights_loaded" and rec.get("version") == version:
            rec["t"] = dt.datetime.fromisoformat(rec["timestamp"].replace("Z", "+00:00")).timestamp()
            return rec
    return None


async def _until(pred, timeout_s: float, what: str):
    try:
        with anyio.fail_after(timeout_s):
            while not (v := pred()):
                await anyio.sleep(0.05)
    except TimeoutError:
        raise SystemExit(f"weights_sync: timed out after {timeout_s:.0f} s waiting for {what}") from None
    return v


def _nudge(engine, seed: int) -> None:
    """Move every parameter a little, as a step would (in the engine's thread)."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for p in engine.ds.module.parameters():
            p.add_(torch.randn(p.shape, generator=g).to(p.device, p.dtype), alpha=1e-4)


def _start_replica(transport: str, args, url: str, engine: dict, work: Path, address: str) -> tuple:
    out = work / f"replica-{transport}"
    out.mkdir()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    cmd = [sys.executable, __file__, "--replica", "--nats", url, "--run", f"wsync-{transport}", "--out", str(out),
           "--engine", json.dumps(engine), "--address", address, "--replica-device", args.replica_device]
    with open(out / "log.jsonl", "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return proc, out


def _stop(proc: subprocess.Popen, out: Path) -> None:
    (out / "stop").write_text("1")
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this bench started for it
        proc.wait()


async def _bench(args, url: str, work: Path) -> dict:
    import msgspec

    from rlvr.actors.bus import Bus
    from rlvr.actors.config import BusConfig, NatsConfig
    from rlvr.learner.config import CollectiveConfig
    from rlvr.learner.engine_config import TrainEngineConfig
    from rlvr.learner.train.trainer import Trainer
    from rlvr.learner.weights.collective import CollectiveHost
    from rlvr.protocol import RunNames

    rollout_engine, learn_engine = _sections(Path(args.config), args.model)
    if args.gpu_memory_utilization:  # two replicas and the learner on one GPU
        rollout_engine["gpu_memory_utilization"] = args.gpu_memory_utilization
    address = f"127.0.0.1:{_free_port()}"
    replicas = {t: _start_replica(t, args, url, rollout_engine, work, address if t == "nccl" else "")
                for t in TRANSPORTS}
    trainer = Trainer(msgspec.convert(learn_engine, TrainEngineConfig), seed=0)
    rows: list[dict] = []
    buses: dict = {}
    nbytes = 0
    try:
        await trainer.start(None)
        for t in TRANSPORTS:
            buses[t] = await Bus.connect(NatsConfig(url=url), BusConfig(), RunNames(f"wsync-{t}"), "bench-learner")
            await buses[t].ensure_topology()
        host = CollectiveHost(CollectiveConfig(backend=args.backend, address=address, timeout_s=120.0,
                                               device=args.device))
        async with anyio.create_task_group() as tg:
            await tg.start(host.run, buses["nccl"])
            for t, (proc, out) in replicas.items():
                await _until(lambda out=out, proc=proc: (out / "ready").exists() or proc.poll() is not None, 900,
                             f"replica {t} ready")
                if proc.poll() is not None:
                    raise SystemExit(f"weights_sync: replica {t} exited {proc.returncode}: see {out / 'log.jsonl'}")
            await _until(lambda: host.members, 300, "the collective replica joined")
            version = {t: 0 for t in TRANSPORTS}
            for r in range(args.repeats + 1):  # round 0 is the untimed warm-up
                for t in TRANSPORTS if r % 2 == 0 else TRANSPORTS[::-1]:
                    version[t] += 1
                    v = version[t]
                    await trainer._call(_nudge, trainer.engine, 1000 * r + v)  # noqa: SLF001 (the engine's thread)
                    load = os.getloadavg()[0]
                    t0 = time.time()
                    await trainer.publish(buses[t], work / f"out-{t}" / "weights", v, v, t,
                                          collective=host if t == "nccl" else None)
                    publish_s = time.time() - t0
                    if t == "nccl":
                        nbytes = host._newest.nbytes  # noqa: SLF001 (what one version sends: the tied head twice)
                    proc, out = replicas[t]
                    rec = await _until(lambda v=v, out=out: _loaded(out / "log.jsonl", v), 600, f"{t} v{v} loaded")
                    row = {"round": r, "transport": t, "version": v, "publish_s": round(publish_s, 3),
                           "fetch_s": rec["fetch_s"], "load_s": rec["load_s"], "e2e_s": round(rec["t"] - t0, 3),
                           "receive_s": rec.get("receive_s"), "digest_s": rec.get("digest_s"),
                           "via": rec.get("transport"), "load1": round(load, 2)}
                    print(json.dumps(row), flush=True)
                    if r:
                        rows.append(row)
            host.stop()
            tg.cancel_scope.cancel()
    finally:
        for t, (proc, out) in replicas.items():
            _stop(proc, out)
        for bus in buses.values():
            await bus.close()
        await trainer.close()
    return {"rows": rows, "bytes": nbytes}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=str(REPO / "examples/smollm2.toml"))
    p.add_argument("--model", default="", help="a model folder for both sides (default: the config's)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    p.add_argument("--device", default="", help="the learner's staging device for the broadcast")
    p.add_argument("--replica-device", default="", help="the replica's receiving device")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.0, help="each vLLM replica's (default: the config's)")
    p.add_argument("--out", default=str(REPO / "bench/results/weights_sync.jsonl"))
    p.add_argument("--replica", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--nats", help=argparse.SUPPRESS)
    p.add_argument("--run", help=argparse.SUPPRESS)
    p.add_argument("--engine", help=argparse.SUPPRESS)
    p.add_argument("--address", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.replica:
        anyio.run(_replica, args)
        return

    from rlvr.cli.natsserver import NatsServer

    with tempfile.TemporaryDirectory(prefix="wsync-") as tmp, NatsServer(Path(tmp) / "nats") as server:
        got = anyio.run(_bench, args, server.url, Path(tmp))
    rows = got["rows"]
    result: dict = {"bench": "weights_sync", "config": args.config, "model": args.model, "bytes": got["bytes"],
                    "repeats": args.repeats, "backend": args.backend, "threads": os.environ["OMP_NUM_THREADS"],
                    "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "command": " ".join(["python", *sys.argv]), "median": {}, "rows": rows}
    print(f"{'':28} {'publish_s':>9} {'fetch_s':>8} {'load_s':>7} {'e2e_s':>6}  load1 (median of {args.repeats})")
    for t in TRANSPORTS:
        mine = [x for x in rows if x["transport"] == t]
        med = {k: round(statistics.median(x[k] for x in mine), 3) for k in ("publish_s", "fetch_s", "load_s", "e2e_s",
                                                                          "load1")}
        result["median"][t] = med
        print(f"{LABEL[t]:28} {med['publish_s']:9.3f} {med['fetch_s']:8.3f} {med['load_s']:7.3f} {med['e2e_s']:6.2f}"
              f"  {med['load1']:.1f}")
    # The same path for a 7B model in bf16 (7.6e9 parameters, 15.2 GB), each part scaled by bytes from
    # B's medians: an estimate (a larger copy may stream better or page more), docs/deploy.md says what else.
    scale = SEVEN_B_BYTES / got["bytes"]
    b = {k: statistics.median(x[k] for x in rows if x["transport"] == "nccl" and x.get(k) is not None)
         for k in ("publish_s", "receive_s", "digest_s", "load_s")}
    result["scaled_7b_s"] = {k: round(v * scale, 1) for k, v in b.items()}
    print(f"7B in bf16 by B's rates ({got['bytes'] / 1e9:.2f} GB -> {SEVEN_B_BYTES / 1e9:.1f} GB): "
          + ", ".join(f"{k} {v:.1f}" for k, v in result["scaled_7b_s"].items())
          + " (the learner's digest is about digest_s again)")
    with open(args.out, "a") as f:
        f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
