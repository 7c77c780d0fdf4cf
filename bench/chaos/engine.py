"""The engine-backed scenario: the same skeleton with a real learner engine
(DeepSpeed on CPU, ZeRO 0, a tiny locally built Qwen2 model of vocabulary 384,
so the trivial rollout's byte token ids are in range) and the path weights
transport, for the faults that are about engine saves and weight publishing:

- SIGKILL while ``commit-N/engine/`` is being written (mid engine save);
- SIGKILL once ``weights/vN/`` exists and before its announcement is on
  WEIGHTS (mid weight publish);
- the learner killed before its first checkpoint, and at a seeded point.

Not here: comparing the final weights with an uninterrupted run's. Batches
are formed in the order groups complete, and two verifier replicas race, so
two runs of this skeleton train the same samples in different batches even
without faults; equality would need a single verifier, one group per step
and a fixed arrival order, which this scenario does not impose.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

from bench.chaos import faults as F
from bench.chaos.faults import _freeze_on, _result
from bench.chaos.invariants import read_committed
from bench.chaos.scenario import Scenario
from bench.chaos.skeleton import Server


def kill_learner_mid_engine_save(sc: Scenario, rng) -> dict:
    """SIGKILL while commit-N/engine/ is being written: some of its files are there, learner.json is not.

    The tiny model saves in milliseconds, so for the duration the learner is traced with strace,
    each ``openat`` delayed on its way out: the save then takes seconds, file by file."""
    deadline = time.monotonic() + 300
    while sc.learner_steps_logged() < 1 and time.monotonic() < deadline:
        time.sleep(0.2)  # past its start-up (thousands of imports would each be delayed)
    root = sc.out / "checkpoints"
    st = read_committed(sc.out).state
    n = (st.commits if st else 0) + 2  # not the next commit: it may be under way already
    engine = root / f"commit-{n:06d}" / "engine"
    pid = sc.sk.roles["learn-0"].proc.pid
    tracer = None
    if shutil.which("strace"):
        tracer = subprocess.Popen(["strace", "-f", "-qq", "-p", str(pid), "-e", "trace=openat",
                                   "-e", "inject=openat:delay_exit=200000", "-o", os.devnull],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    files_then = 0
    try:
        def partial() -> bool:
            nonlocal files_then
            files_then = sum(1 for p in engine.rglob("*") if p.is_file())
            return not (engine.parent / "learner.json").exists()

        # Wait for the first file under engine/ (the directory is made before any byte).
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not (engine.exists() and any(p.is_file() for p in engine.rglob("*"))):
            time.sleep(0.001)
        os.kill(pid, signal.SIGSTOP)
        hit = partial() if engine.exists() else None
        sc.sk.signal("learn-0", signal.SIGKILL)
        sc.sk.signal("learn-0", signal.SIGCONT)
        rc = sc.sk.wait_exit("learn-0", 30)
    finally:
        if tracer is not None:
            if tracer.poll() is None:
                tracer.kill()
            tracer.wait()
    sc.start_learner()
    return _result("sigkill:learn:mid_engine_save", commit=n, hit=bool(hit), engine_files_written=files_then, rc=rc,
                   opens_delayed_s=0.2 if tracer else 0)


def kill_learner_mid_weight_publish(sc: Scenario, rng) -> dict:
    """SIGKILL once a version's weights directory exists and before its announcement (engine only)."""
    weights = sc.out / "weights"
    have = [int(p.name[1:]) for p in weights.glob("v*") if p.name[1:].isdigit()] if weights.exists() else []
    version = max(have, default=0) + 2  # not the next one: it may be under way already
    vdir = weights / f"v{version}"

    def not_announced() -> bool:
        from rlvr.protocol import WeightsAnnouncement, decode

        names = sc.obs.names
        last = sc.obs.try_call(sc.obs.js.get_last_msg(names.stream("WEIGHTS"), names.weights), timeout_s=8)
        return last is None or decode(last.data, WeightsAnnouncement).version < version

    hit = _freeze_on(sc, vdir, 180, not_announced)
    sc.sk.signal("learn-0", signal.SIGKILL)
    sc.sk.signal("learn-0", signal.SIGCONT)
    rc = sc.sk.wait_exit("learn-0", 30)
    sc.start_learner()
    return _result("sigkill:learn:mid_weight_publish", version=version, hit=bool(hit), rc=rc)


def engine_plan(rng: random.Random, quick: bool) -> list[tuple[str, object]]:
    n = 1 if quick else 3
    plan = [("sigkill:learn:mid_engine_save", kill_learner_mid_engine_save)] * n
    plan += [("sigkill:learn:mid_weight_publish", kill_learner_mid_weight_publish)] * n
    plan += [("sigkill:learn", F.kill_learner_seeded)] * (1 if quick else 2)
    rng.shuffle(plan)
    return plan


def run_engine_scenario(root: Path, run: str, seed: int, quick: bool) -> dict:
    from bench.chaos.run import run_fault
    from rlvr.learner.example.tiny_model import build_tiny_model

    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    model = root / "model"
    if not (model / "config.json").exists():
        build_tiny_model(model, hidden=64, layers=1, heads=2)
    server = Server(root / "nats-store", name=f"{run}-n1").start()
    learn = {"engine": {"model_path": str(model), "zero_stage": 0, "micro_batch_tokens": 256,
                        "optimizer": {"lr": 1e-3}, "export_dtype": "fp32"},
             "weights_transport": "path", "sync_every": 1, "checkpoint_every": 2, "lease_ttl_s": 5.0}
    sc = Scenario(root, run, seed=seed, servers=[server], verify_replicas=1, learn=learn)
    records: list[dict] = []
    result: dict = {"scenario": "engine", "run": run, "seed": seed}
    try:
        sc.start(learner_config=sc.config("learn-first", learn={"checkpoint_every": 1000}))
        sc.start_sampling()
        records.append(run_fault(sc, "sigkill:learn:before_first_checkpoint", F.kill_learner_before_first_checkpoint,
                                 rng))
        for label, fn in engine_plan(rng, quick):
            records.append(run_fault(sc, label, fn, rng))
        result["finish"] = sc.finish(timeout_s=600)
    except Exception as e:  # the runner's own failure: kept with the faults done so far
        sc.violations.append(f"the runner failed: {type(e).__name__}: {e}")
    finally:
        result["faults"] = records
        result["violations"] = sc.violations
        sc.close()
        server.kill()
    return result
