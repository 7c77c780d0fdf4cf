"""``rlvr-actor autoscale --role verify``: verifier replicas on this machine that follow the backlog.

For a user who runs the roles by hand on one big CPU box: this process starts
``min_replicas`` verifier replicas (``rlvr-actor --role verify``), then every
``interval_s`` reads the ``verify`` durable's backlog and the replicas'
heartbeats, and starts, drains or replaces replicas as ``[autoscale]``
says (``rlvr.cli.autoscale.policy``). Ctrl-C (or SIGTERM) drains every
replica and exits 0; replicas that keep failing at start make it exit 1.

The replicas run the config this command resolved (the file, then
``--nats``/``--run``), written to ``<log-dir>/autoscale-config.json``; their
logs and ``autoscale.jsonl`` (every decision and replica event) go to
``--log-dir``. Under ``rlvr-actor up``, ``[autoscale] enabled = true`` does
the same inside ``up``.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Literal

import msgspec

from rlvr.cli.args import RunArgs, add_run_arguments, load_run_config

DESCRIPTION = ("Run verifier replicas on this machine and scale them on the verify consumer's backlog "
               "(the [autoscale] section; --min/--max override its bounds).")


class Args(RunArgs, frozen=True, kw_only=True):
    role: Literal["verify"] = "verify"
    min: int | None = None
    max: int | None = None
    log_dir: str = "autoscale-logs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_arguments(p)
    p.add_argument("--role", choices=("verify",), default="verify",
                   help="the role to scale (verifier replicas: the CPU-bound, stateless one)")
    p.add_argument("--min", type=int, help="overrides autoscale.min_replicas")
    p.add_argument("--max", type=int, help="overrides autoscale.max_replicas")
    p.add_argument("--log-dir", default="autoscale-logs", help="replica logs and autoscale.jsonl")


def run(args: Args) -> int:
    from rlvr.cli.autoscale.fleet import Fleet
    from rlvr.cli.autoscale.policy import AutoscaleConfig
    from rlvr.cli.autoscale.scaler import Autoscaler
    from rlvr.cli.children import spawn_role
    from rlvr.cli.run_config import dump_config

    cfg = load_run_config(args, "rlvr-actor autoscale")
    raw = msgspec.to_builtins(cfg.autoscale)
    raw.update({k: v for k, v in (("min_replicas", args.min), ("max_replicas", args.max)) if v is not None})
    try:
        auto = msgspec.convert(raw, AutoscaleConfig)
    except msgspec.ValidationError as e:
        print(f"rlvr-actor autoscale: {e} (autoscale, with --min/--max)", file=sys.stderr)
        return 2
    log_dir = Path(args.log_dir).resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    config_file = log_dir / "autoscale-config.json"
    config_file.write_bytes(dump_config(cfg))
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    fleet = Fleet(lambda name: spawn_role(args.role, name, config_file, log_dir,
                                          threads=cfg.up.threads_per_process),
                  role=args.role, first_index=first_index(log_dir, args.role),
                  drain_deadline_s=cfg.bus.drain_timeout_s + 10)
    # The scaler first: it records every fleet event, the first replicas' starts included.
    scaler = Autoscaler(auto, fleet, run=cfg.run, nats_cfg=cfg.nats, heartbeat_every_s=cfg.bus.heartbeat_every_s,
                        events_path=log_dir / "autoscale.jsonl", say=lambda line: print(line, flush=True))
    fleet.start(auto.min_replicas)
    scaler.start()
    print(f"[autoscale] {args.role} replicas {auto.min_replicas}-{auto.max_replicas} for run {cfg.run}; "
          f"logs in {log_dir}", flush=True)
    code = 0
    try:
        while not stop.wait(0.5):
            if scaler.fatal:
                print(f"rlvr-actor autoscale: {scaler.fatal}", file=sys.stderr, flush=True)
                code = 1
                break
    finally:
        scaler.stop()
        _drain_all(fleet, cfg.up.stop_timeout_s + cfg.bus.drain_timeout_s)
    return code


def first_index(log_dir: Path, role: str) -> int:
    """The first replica number no earlier scaler used in ``log_dir`` (one past its ``<role>-<N>.log``).

    A scaler restarted after a crash (SIGKILL, the OOM killer) finds its old replicas still
    draining (they follow it out: ``rlvr.actors.lifeline``); numbering from 0 again would give a
    new replica the name of a live one, so two processes would share a log file and a heartbeat
    subject, and the new scaler would read the old one's ``draining`` heartbeats as its own."""
    used = [p.stem[len(role) + 1:] for p in log_dir.glob(f"{role}-*.log")]
    return max((int(n) for n in used if n.isdigit()), default=-1) + 1


def _drain_all(fleet, timeout_s: float) -> None:
    """SIGTERM every replica (they drain), then kill what is left after ``timeout_s``."""
    running = fleet.running()
    for c in running:
        c.signal(signal.SIGTERM)
    for c in running:
        try:
            c.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            c.kill_group()
            c.proc.wait()
        print(f"[autoscale] {c.replica} exited with {c.proc.returncode}", flush=True)
