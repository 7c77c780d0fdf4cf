"""``rlvr-actor up``: the whole system on one machine.

1. Create the run directory ``<runs_dir>/<run>-<UTC time>`` (kept afterwards:
   logs, traces, metrics, checkpoints, summary).
2. Start an embedded ``nats-server`` with JetStream, its store in the run dir.
3. Start every role as its own OS process (``rlvr-actor --role ...``), each
   in its own session so that Ctrl-C reaches ``up`` alone and ``up`` stops
   them in order, by PID.
4. Wait for the learner to finish its steps, then stop the other roles with
   SIGTERM (they drain), stop the server, and print the summary.

A child that exits non-zero while the run is going stops the run: ``up``
says which and where its log is, and exits non-zero itself. The learner
stops a run that cannot learn (every recent training sample failed:
``rlvr.learner.watch.failure_stop``) with exit code 4; ``up`` shows the
first failure's exception line and the fix, and ends with 4. A role that
has to be killed at the stop (it did not drain within ``up.stop_timeout_s``)
makes the exit code 1 if it was 0: the summary never says 0 for that. With
``[autoscale] enabled``, the verifier replicas belong to the autoscaler
(``rlvr.cli.autoscale``): it starts them, drains them, and replaces one that
dies; only replicas that keep failing at start stop the run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Literal

import msgspec

from rlvr.cli.autoscale.fleet import Fleet
from rlvr.cli.autoscale.scaler import Autoscaler
from rlvr.cli.autoscale.scaler import summary as autoscale_summary
from rlvr.cli.children import Child, child_env, spawn_role
from rlvr.cli.cpus import CpuSplit, split_for
from rlvr.cli.natsserver import NatsServer
from rlvr.cli.run_config import Config, ConfigError, dump_config, load_config
from rlvr.cli.ui.display import make_display
from rlvr.learner.watch.failure_stop import CANNOT_LEARN_EXIT

DESCRIPTION = "Start an embedded nats-server and every role as its own process."


class Args(msgspec.Struct, frozen=True, kw_only=True):
    config: str | None = None  # None: the built-in example
    run: str | None = None
    run_dir: str | None = None
    display: Literal["auto", "live", "plain", "logs"] | None = None
    set: list[str] = []  # KEY=VALUE overrides, VALUE in TOML
    trace_all: bool = False  # every trajectory traced (observability.trace_sample_ratio = 1)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML config (default: the built-in example)")
    p.add_argument("--run", help="run id")
    p.add_argument("--run-dir", help="run directory (default: <up.runs_dir>/<run>-<time>)")
    p.add_argument("--display", choices=("auto", "live", "plain", "logs"), help="terminal output")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key, VALUE written in TOML (repeatable), e.g. "
                        "--set learn.steps=100 --set 'learn.dataset.verifier={name=\"random\",params={p=0.3}}'")
    p.add_argument("--trace-all", action="store_true",
                   help="trace every trajectory, not the default sample (observability.trace_sample_ratio = 1)")


def parse_sets(items: list[str]) -> dict:
    """``KEY=VALUE`` pairs as dotted overrides; VALUE is TOML (a bare word that is not TOML is a string)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        try:
            out[key.strip()] = msgspec.toml.decode(f"v = {value}")["v"]
        except msgspec.DecodeError:
            out[key.strip()] = value
    return out


class StopRequest(msgspec.Struct):
    """Why `up` is stopping, set by its signal handler: the signal received
    (None while running) and the preparation child to terminate, if one runs."""

    signal: int | None = None
    prepare: subprocess.Popen | None = None


def builtin_config_path() -> Path:
    return Path(str(resources.files("rlvr.cli").joinpath("builtin.toml")))


def run(args: Args) -> int:
    path = args.config or builtin_config_path()
    try:
        overrides = {**parse_sets(args.set), **({"run": args.run} if args.run else {}),
                     **({"observability.trace_sample_ratio": 1.0} if args.trace_all else {})}
        cfg = load_config(path, overrides=overrides)
    except ConfigError as e:
        print(f"rlvr-actor up: {e}", file=sys.stderr)
        return 2
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_dir = Path(args.run_dir or Path(cfg.up.runs_dir) / f"{cfg.run}-{stamp}").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    display = make_display(args.display or cfg.up.display, run_dir)
    stop = StopRequest()

    def on_signal(signum: int, _frame: object) -> None:
        stop.signal = signum
        prep = stop.prepare  # a preparation step is running: it has no state worth draining
        if prep is not None and prep.poll() is None:
            prep.terminate()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    started, started_at = time.monotonic(), time.time()
    from rlvr.cli.bus_disk import bus_disk_shortfall  # here: it imports the bus (nats), which `up --help` must not

    if (short := bus_disk_shortfall(cfg, run_dir / "nats")) is not None:
        display.error(short)  # before anything starts: JetStream would refuse the learner's streams
        return 1
    cpus = split_for(cfg.up)
    server = NatsServer(run_dir / "nats", log_file=run_dir / "logs" / "nats-server.log",
                        cpus=cpus.others if cpus else None).start()
    children: list[Child] = []
    scaler: Autoscaler | None = None
    code = 0
    try:
        cfg = load_config(path, overrides={**overrides, "nats.url": server.url})
        cfg = _resolve_engine(cfg, display)
        if cfg.stages:  # stages in one run (cli/stages/): each its own roles, one after another
            from rlvr.cli.stages.runner import run_stages

            return run_stages(cfg, run_dir, display, stop, started_at)
        try:
            cfg = _prepare(cfg, run_dir, display, stop)
        except PrepareFailedError as e:
            if stop.signal is not None:
                display.info(f"received {signal.Signals(stop.signal).name} during preparation: stopped; "
                             f"logs in {run_dir / 'logs'}")
                return 0
            display.error(str(e))
            return 1
        config_file = run_dir / "config.json"
        config_file.write_bytes(dump_config(cfg))
        display.info(f"run dir {run_dir}")
        display.info(f"nats-server on {server.url} (store {run_dir / 'nats'})")
        if cpus is not None:
            display.info(f"cores: {cpus.describe()} (up.pin_learner)")
        plan = [("learn", 1), ("rollout", cfg.up.rollout_replicas)]
        if not cfg.autoscale.enabled:
            plan.append(("verify", cfg.up.verify_replicas))
        for role, count in plan:
            for i in range(count):
                children.append(_spawn(role, f"{role}-{i}", config_file, run_dir, cfg, cpus))
        if cfg.autoscale.enabled:
            scaler = _autoscaler(cfg, config_file, run_dir, display, cpus)
        display.info("started " + ", ".join(f"{c.replica} (pid {c.proc.pid})" for c in _running(children, scaler)))
        code = _supervise(children, stop, display, scaler)
    finally:
        if scaler is not None:
            scaler.stop()
        everyone = _running(children, scaler)
        killed = _stop_all(everyone, cfg.up.stop_timeout_s, display)
        server.stop()
    if killed and code == 0:
        code = 1  # a role that would not stop is a fault, whatever came before it
    wall = time.monotonic() - started
    summary = _write_summary(run_dir, cfg, wall, code, scaler, started_at, everyone)
    if (run_dir / "metrics.jsonl").exists():
        try:
            from rlvr.cli.commands.report import summarize, write_plots

            summary = summarize(run_dir)
            display.info(f"plots: {len(write_plots(run_dir))} PNG files in {run_dir / 'plots'}")
        except Exception as e:  # a report must not turn a finished run into a failure
            display.error(f"report failed: {type(e).__name__}: {e}")
    display.finish(summary, run_dir)
    if stop.signal is not None and code == 0:
        display.info("stopped on request; the run dir keeps logs, metrics and checkpoints")
    return code


def _prepare(cfg: Config, run_dir: Path, display, stop: StopRequest) -> Config:
    """Run the config's preparation step (the built-in example builds and
    warms up its model here), in a child process, then point every role at
    the prepared model. The child has its own session, like the roles: a
    Ctrl-C reaches `up` alone, whose handler terminates the child through
    ``stop.prepare``."""
    if cfg.learn.prepare is None:
        return cfg
    pre_config = run_dir / "config.pre.json"
    pre_config.write_bytes(dump_config(cfg))
    display.info("preparing the model (tokenizer, tiny Qwen2, cold-start SFT); log in logs/prepare.log")
    env = child_env(PYTHONUNBUFFERED="1")
    if cfg.up.threads_per_process:
        env["OMP_NUM_THREADS"] = str(max(2, cfg.up.threads_per_process))
    with open(run_dir / "logs" / "prepare.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlvr.learner.example.prepare", "--config", str(pre_config), "--run-dir", str(run_dir)],
            stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True,
        )
        stop.prepare = proc
        if stop.signal is not None:  # the signal came while the child was starting
            proc.terminate()
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            log.write(raw)
            if line.startswith("[sft]"):
                display.info(line)
        stop.prepare = None
        if proc.wait() != 0:
            raise PrepareFailedError(f"preparation failed (exit {proc.returncode}); see {run_dir / 'logs' / 'prepare.log'}")
    info = json.loads((run_dir / "prepared.json").read_text())
    display.info(f"model ready: {info['model']} after {info['sft_steps']} SFT steps, "
                 f"greedy held-out pass@1 {info['sft_greedy_pass_at_1']:.3f}")
    raw = msgspec.to_builtins(cfg)
    raw["rollout"]["engine"]["model"] = info["model"]
    if raw["learn"].get("engine"):
        raw["learn"]["engine"]["model_path"] = info["model"]
    return msgspec.convert(raw, Config)


class PrepareFailedError(RuntimeError):
    pass


def _resolve_engine(cfg: Config, display) -> Config:
    """Fall back from vLLM to the HF engine when vLLM does not import here."""
    import importlib.util

    engine = cfg.rollout.engine
    tag = engine.__struct_config__.tag
    if tag == "vllm" and importlib.util.find_spec("vllm") is None:
        from rlvr.rollout.engines.base import HFEngineConfig

        display.info("engine: vllm does not import on this machine; using the hf engine (transformers)")
        hf = HFEngineConfig(model=engine.model, dtype=engine.dtype if engine.dtype != "auto" else "float32",
                            max_prompt_tokens=engine.max_prompt_tokens)
        return msgspec.structs.replace(cfg, rollout=msgspec.structs.replace(cfg.rollout, engine=hf))
    display.info(f"engine: {tag}")
    return cfg


def _spawn(role: str, replica: str, config_file: Path, run_dir: Path, cfg: Config, cpus: CpuSplit | None) -> Child:
    threads = cfg.up.learner_threads if role == "learn" and cfg.up.learner_threads else cfg.up.threads_per_process
    return spawn_role(role, replica, config_file, run_dir / "logs", threads=threads,
                      extra_env={"RLVR_RUN_DIR": str(run_dir)}, cpus=cpus)


def _autoscaler(cfg: Config, config_file: Path, run_dir: Path, display, cpus: CpuSplit | None) -> Autoscaler:
    """The verifier replicas under an autoscaler: it starts them and owns them."""
    a = cfg.autoscale
    fleet = Fleet(lambda name: _spawn("verify", name, config_file, run_dir, cfg, cpus), role="verify",
                  drain_deadline_s=cfg.bus.drain_timeout_s + 10)
    fleet.start(min(a.max_replicas, max(a.min_replicas, cfg.up.verify_replicas)))
    return Autoscaler(a, fleet, run=cfg.run, nats_cfg=cfg.nats, heartbeat_every_s=cfg.bus.heartbeat_every_s,
                      events_path=run_dir / "autoscale.jsonl", say=display.info).start()


def _running(children: list[Child], scaler: Autoscaler | None) -> list[Child]:
    return children + (scaler.fleet.running() if scaler else [])


def _supervise(children: list[Child], stop: StopRequest, display, scaler: Autoscaler | None) -> int:
    """Until the learner is done: a fixed child that exits stops the run. Verifier
    replicas under an autoscaler are its own (it replaces one that dies), unless
    they keep failing at start, which stops the run too."""
    learner = next(c for c in children if c.role == "learn")
    while stop.signal is None:
        display.tick(_running(children, scaler))  # a drained replica leaves the view
        rc = learner.proc.poll()
        if rc is not None:
            if rc == CANNOT_LEARN_EXIT:  # it stopped the run itself, saying what failed and how to fix it
                display.error(f"the learner stopped the run (exit {rc}): "
                              f"{learner.failure().removeprefix('RunCannotLearnError: ')}\n"
                              f"  (the whole log: {learner.log_path}; the summary below says it again)")
            elif rc != 0:
                display.error(f"learner exited with {rc}: {learner.failure() or 'no reason logged'}\n"
                              f"  (the whole log: {learner.log_path})")
            return rc
        for c in children:
            rc = c.proc.poll()
            if rc is not None and c is not learner:
                display.error(f"{c.replica} exited with {rc} while the run was going: "
                              f"{c.failure() or 'no reason logged'}\n  (the whole log: {c.log_path})")
                return rc or 1
        if scaler is not None and scaler.fatal:
            display.error(f"autoscaler: {scaler.fatal}")
            return 1
        time.sleep(0.5)
    display.info(f"received {signal.Signals(stop.signal).name}: stopping every role")
    return 0


def _stop_all(children: list[Child], timeout_s: float, display) -> list[str]:
    """SIGTERM every live child (they drain), SIGKILL the group of any still running after
    ``timeout_s``; the replicas that had to be killed."""
    live = [c for c in children if c.proc.poll() is None]
    killed = []
    for c in live:
        os.kill(c.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for c in live:
        try:
            c.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            display.error(f"{c.replica} did not stop within {timeout_s}s; killing pid {c.proc.pid}")
            os.killpg(c.proc.pid, signal.SIGKILL)
            c.proc.wait()
            killed.append(c.replica)
    for c in children:
        display.info(f"{c.replica} exited with {c.proc.returncode}" + (" (killed)" if c.replica in killed else ""))
    return killed


def _write_summary(run_dir: Path, cfg: Config, wall: float, code: int, scaler: Autoscaler | None,
                   started_at: float, children: list[Child]) -> dict:
    learner = run_dir / "learner_summary.json"
    summary = json.loads(learner.read_text()) if learner.exists() else {}
    gain = summary.get("time_to_gain")
    if isinstance(gain, dict) and gain.get("finished_at"):
        gain["up_seconds"] = round(gain["finished_at"] - started_at, 1)  # from the `up` command's start
    summary.update(
        run_dir=str(run_dir),
        engine=cfg.rollout.engine.__struct_config__.tag,
        wall_seconds=round(wall, 1),
        exit_code=code,
        # Each role's own exit code (-9: killed at the stop); up's exit_code is never 0 when one was killed.
        role_exit_codes={c.replica: c.proc.returncode for c in children},
    )
    if scaler is not None:
        summary["autoscale"] = autoscale_summary(scaler)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
