"""One rlvr-actor run as its users run it: ``rlvr-actor up`` on the task's config, stopped at the budget.

The config is the task's own (``cli/builtin.toml`` or ``examples/smollm2.toml``) with four changes,
none of them algorithmic: both roles load the shared cold-start checkpoint (the built-in example's
preparation step is skipped: both frameworks start from the same weights, prepared once), the in-run
held-out rounds are off (the benchmark evaluates saved weights afterwards, for both alike), every
``keep_every``-th exported policy version is kept (``learn.keep_weights_every``: the timed snapshots),
and ``learn.steps`` is large (the wall-time budget ends the run: SIGINT, as a person's Ctrl-C).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec

from vs_trl import profile
from vs_trl.watch import Watch


def write_config(config: Path, model_dir: Path, out: Path, *, keep_every: int) -> Path:
    raw = msgspec.toml.decode(Path(config).read_bytes())
    learn = raw.setdefault("learn", {})
    learn.pop("prepare", None)
    raw["rollout"]["engine"]["model"] = str(model_dir)
    learn.setdefault("engine", {})["model_path"] = str(model_dir)
    learn["eval"] = {**learn.get("eval", {}), "prompts": 0, "every_steps": 0}
    learn["keep_weights_every"] = keep_every
    learn["steps"] = 100_000
    out.mkdir(parents=True, exist_ok=True)
    path = out / "rlvr_config.json"
    path.write_bytes(msgspec.json.encode(raw))
    return path


def up_command(config_json: Path, run_dir: Path, sets: list[str] | tuple[str, ...] = ()) -> list[str]:
    """``rlvr-actor up`` on the written config, each of ``sets`` (``KEY=VALUE``) as an ``--set``."""
    return [sys.executable, "-m", "rlvr.cli.main", "up", "--config", str(config_json), "--run-dir", str(run_dir),
            "--display", "plain", *(a for item in sets for a in ("--set", item))]


def run(config_json: Path, run_dir: Path, budget_s: float, *, stop_grace_s: float = 90,
        sets: list[str] | tuple[str, ...] = ()) -> dict:
    """Start ``up`` (with ``sets`` as its ``--set`` overrides), stop it at ``budget_s`` after the launch,
    and return what it left and cost."""
    cmd = up_command(config_json, run_dir, sets)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    run_dir.mkdir(parents=True, exist_ok=True)
    launched = time.time()
    with open(run_dir.parent / f"{run_dir.name}.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        with Watch(proc.pid) as watch:
            try:
                proc.wait(timeout=budget_s)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)
            stopped = time.time()
            try:
                proc.wait(timeout=stop_grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    got = collect(run_dir, launched, stopped - launched)
    got["breakdown"] = profile.breakdown(got, profile.span_totals(run_dir), launched)
    return {"launched": launched, "stopped": stopped, "exit": proc.returncode, **watch.summary(), **got}


def collect(run_dir: Path, launched: float, wall_s: float) -> dict:
    """The timed snapshots (``weights/v<N>`` kept by keep_weights_every) and the step records' totals."""
    snapshots = []
    for d in run_dir.rglob("weights/v*"):
        files = list(d.glob("*.safetensors"))
        if d.name[1:].isdigit() and files:
            t = max(f.stat().st_mtime for f in files) - launched
            if 0 <= t <= wall_s:  # written during this run (run() starts in a fresh folder)
                snapshots.append({"step": int(d.name[1:]), "t": round(t, 2), "path": str(d)})
    snapshots.sort(key=lambda s: s["step"])
    records = [r for m in run_dir.rglob("metrics.jsonl") for r in map(json.loads, m.read_text().splitlines())]
    steps = [r for r in records if "train_s" in r]
    trained = sum(r["samples"] for r in steps)
    tokens = sum(r["samples"] * r.get("response_len_mean", 0) for r in steps)
    last = steps[-1] if steps else {}
    dropped = sum(v for k, v in last.items() if k.startswith("drop_") and isinstance(v, (int, float)))
    scored = max([r["scored"] for r in records if isinstance(r.get("scored"), (int, float))], default=0)
    dropped = max(dropped, scored - trained)  # a later progress record counts what was scored since
    return {
        "snapshots": snapshots,
        "steps": len(steps),
        "train_s": round(sum(r["train_s"] for r in steps), 2),
        "wait_s": round(sum(r["wait_s"] for r in steps), 2),
        "publish_s": round(sum(r["publish_s"] for r in steps), 2),
        "samples_trained": trained,
        "samples_generated": trained + int(dropped),
        "tokens_trained": round(tokens),
        # the dropped samples' lengths are not recorded: counted at the trained samples' mean length
        "tokens_generated": round(tokens / trained * (trained + dropped)) if trained else 0,
        "wall_s": round(wall_s, 2),
    }
