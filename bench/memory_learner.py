"""The learner's memory by phase, in one process: imports, the DeepSpeed engine, the first steps, many.

    OMP_NUM_THREADS=1 python bench/memory_learner.py --model runs/<run>/model --steps 200

The engine is the built-in example's (``[learn.engine]`` of ``cli/builtin.toml``) on a prepared model
(an earlier ``up``'s ``<run_dir>/model``); each step trains ``--groups`` x ``--group-size`` samples shaped
like the example's (a 6-token prompt, a 3-token completion) and exports the weights, as the learner does
with ``sync_every = 1``. After each phase it prints the process's RSS and USS, so the learner role's
figure in ``bench/memory_by_process.py`` can be split into what the imports, the engine and the steps
hold, and what the actor around them (bus, custody, records) adds. Each ``--env`` (``KEY=VALUE,...``) runs
the same in a fresh subprocess with those variables set, for allocator settings (``MALLOC_ARENA_MAX=2``).

Not covered: the actor's own state (custody, ledger, the bus client): ``bench/memory_by_process.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIB = 2**20


def _anon_mib() -> float:
    """Anonymous resident memory (heap, tensors, Python objects): the process's own, whatever else runs."""
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _minor_faults() -> int:
    """This process's minor page faults so far (/proc/self/stat field 10): each fresh page a big
    allocation touches is one."""
    return int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[7])


def phases(model: Path, steps: int, groups: int, group_size: int) -> list[dict]:
    import psutil

    me = psutil.Process()
    out: list[dict] = []

    def mark(name: str) -> None:
        m = me.memory_full_info()
        out.append({"phase": name, "rss": round(m.rss / MIB, 1), "anon": _anon_mib(), "uss": round(m.uss / MIB, 1),
                    "modules": len(sys.modules), "t": round(time.monotonic() - started, 1)})

    started = time.monotonic()
    mark("python")
    import msgspec
    import torch

    mark("import torch")
    from rlvr.learner.engine_config import TrainEngineConfig
    from rlvr.learner.train.engine import LearnerEngine, TrainBatchItem

    mark("import the engine module")
    builtin = Path(__file__).resolve().parents[1] / "cli" / "builtin.toml"
    raw = msgspec.toml.decode(builtin.read_bytes())["learn"]["engine"]
    cfg = msgspec.convert({**raw, "model_path": str(model)}, TrainEngineConfig)
    engine = LearnerEngine(cfg, seed=0)
    mark("engine built (imports deepspeed, transformers)")
    gen = torch.Generator().manual_seed(0)

    def batch() -> list[TrainBatchItem]:
        items = []
        for i in range(groups * group_size):
            prompt = torch.randint(3, 20, (6,), generator=gen).tolist()
            completion = torch.randint(3, 20, (3,), generator=gen).tolist()
            adv = float(torch.randn(1, generator=gen))
            items.append(TrainBatchItem(prompt, completion, [-2.0] * 3, adv, f"s{i}"))
        return items

    times, cpu = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for step in range(1, steps + 1):
            items = batch()
            t, c = time.perf_counter(), time.process_time()
            engine.train_step(items)
            engine.export_weights(Path(tmp) / "weights")
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            if step in (1, 10) or step == steps or step % 100 == 0:
                mark(f"after step {step}")
    # train + export, the warm-up left out; CPU seconds (user + system) say more than wall time on a shared host
    out[-1]["step_s_median"] = round(statistics.median(times[5:] or times), 4)
    out[-1]["step_cpu_s_median"] = round(statistics.median(cpu[5:] or cpu), 4)
    out[-1]["minor_faults"] = _minor_faults()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True, help="a prepared model folder")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--groups", type=int, default=32)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE[,KEY=VALUE]: one more variant")
    p.add_argument("--repeats", type=int, default=1, help="each variant this many times, interleaved")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help="append the results as one JSON line")
    args = p.parse_args()
    if args.child:
        print(json.dumps(phases(args.model, args.steps, args.groups, args.group_size)))
        return 0
    results = []
    for variant in ["", *args.env] * args.repeats:
        extra = dict(kv.split("=", 1) for kv in variant.split(",") if kv)
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **extra}
        cmd = [sys.executable, __file__, "--child", "--model", str(args.model), "--steps", str(args.steps),
               "--groups", str(args.groups), "--group-size", str(args.group_size)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        rows = json.loads(done.stdout.strip().splitlines()[-1])
        results.append({"env": extra, "phases": rows})
        print(f"\nenv {extra or '(as is)'}\n| phase | s | RSS MiB | anonymous MiB | USS MiB | modules |\n"
              "| --- | --- | --- | --- | --- | --- |")
        for r in rows:
            print(f"| {r['phase']} | {r['t']} | {r['rss']} | {r['anon']} | {r['uss']} | {r['modules']} |")
        print(f"step (train + export) median: {rows[-1]['step_s_median']} s wall, {rows[-1]['step_cpu_s_median']} s CPU; "
              f"{rows[-1]['minor_faults']} minor page faults in all")
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps({"command": " ".join(sys.argv), "steps": args.steps, "results": results}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
