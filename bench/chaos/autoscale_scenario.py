"""The autoscale scenario: verifier replicas run by ``rlvr-actor autoscale --role verify``, under faults.

A run of its own (``chaos6``, its own nats-server): the usual skeleton (dry learner, trivial-engine
rollout) but no fixed verifier replicas. The runner starts the scaler (``autoscale-verify``, by PID
in its own process group, like any role) and the scaler starts, drains and replaces the verifier
replicas (``verify-N``, logs in ``<root>/fleet``) on the ``verify`` durable's backlog, within
``[autoscale]`` bounds of 1 to 3 and a half-second interval.

The lever on the backlog is the verifier itself: the dataset is scored by
``tests.verifier_fixtures:paced``, which costs 0.2 s a sample while the file ``<root>/slow``
exists and nothing otherwise. With the flag, one replica (one pool worker) verifies 5 samples/s
and the backlog fills the feeder's window (4 tasks: 4 group messages of 4 samples, protocol/groups.py;
the backlog counts messages), which is 4x ``target_backlog_per_replica``: the scaler goes up to 3
within seconds. Without it the backlog is empty or one group and it drains back to 1 after
``scale_down_stabilization_s``.

The runner's checks apply unchanged (custody: 0 lost, 0 trained twice; progress; no hung role):
the scaler is a role of ``Scenario.verifiers`` (its own heartbeat, ``autoscale-verify``), restarted
by ``revive`` if it exits on its own, stopped by ``finish`` with SIGTERM (it drains every replica
and exits 0); ``all_alive`` also wants a running heartbeat from one of its replicas. The replicas'
processes are found by their config file (``<root>/fleet/autoscale-config.json`` on their command
line), which no other process of any run has: no replica may outlive the scenario.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import traceback
from pathlib import Path

from bench.chaos import autoscale_faults as A
from bench.chaos.scenario import Scenario
from bench.chaos.skeleton import REPO, Role

SCALER = "autoscale-verify"  # the scaler's heartbeat replica name, and its Role in the skeleton
PACED = "tests.verifier_fixtures:paced"
AUTOSCALE = {"min_replicas": 1, "max_replicas": 3, "target_backlog_per_replica": 1, "tolerance": 0.1,
             "scale_up_cooldown_s": 2.0, "scale_down_stabilization_s": 3.0, "interval_s": 0.5,
             "startup_grace_s": 20.0, "dead_after_s": 8.0}


class EventLog:
    """``autoscale.jsonl`` read incrementally (complete lines only; every scaler start appends to it)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.events = path, 0, []

    def poll(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return self.events
        end = data.rfind(b"\n")
        if end >= 0:
            for line in data[:end].splitlines():
                try:
                    self.events.append(json.loads(line))
                except ValueError:
                    self.events.append({"event": "?", "raw": line[:200].decode(errors="replace")})
            self.offset += end + 1
        return self.events

    def wait(self, pred, since: int, timeout_s: float, poll_s: float = 0.005) -> dict | None:
        """The first event at index >= ``since`` that satisfies ``pred`` (a tight poll: faults act on it)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for ev in self.poll()[since:]:
                if pred(ev):
                    return ev
            since = max(since, len(self.events))
            if time.monotonic() > deadline:
                return None
            time.sleep(poll_s)


class AutoscaleScenario(Scenario):
    def __init__(self, root: Path, run: str, **kw) -> None:
        self.slow_flag = root / "slow"
        dataset = {"kind": "arithmetic", "verifier": {"name": PACED, "params": {
            "path": str(self.slow_flag), "seconds": 0.2, "gold": "{gold}"}}}
        super().__init__(root, run, verify_replicas=0, learn={"dataset": dataset}, **kw)
        self.verifiers = [SCALER]  # what finish() stops with SIGTERM after the drain, and all_alive checks
        self.fleet_dir = root / "fleet"
        self.fleet_config = self.fleet_dir / "autoscale-config.json"  # the scaler writes it: its replicas' config
        self.events = EventLog(self.fleet_dir / "autoscale.jsonl")
        self.scaler_starts = 0

    def config(self, name: str, **kw) -> Path:
        path = super().config(name, **kw)
        cfg = json.loads(path.read_text())
        cfg["verify"]["plugins"] = [PACED]
        cfg["autoscale"] = dict(AUTOSCALE)
        path.write_text(json.dumps(cfg))
        return path

    @property
    def drain_deadline_s(self) -> float:
        return self.bus["drain_timeout_s"] + 10  # what `rlvr-actor autoscale` gives its Fleet

    def set_slow(self, on: bool) -> None:
        if on:
            self.slow_flag.touch()
        else:
            self.slow_flag.unlink(missing_ok=True)

    # --- the scaler -----------------------------------------------------------------------
    def start(self, *, learner_config: Path | None = None) -> None:
        from bench.chaos.observe import Observer

        self.obs = Observer(self.urls, self.run)
        self.start_learner(config=learner_config)
        for r in self.rollouts:
            self.sk.start("rollout", r, self.rollout_config(r))
        self.start_scaler()
        for r in self.rollouts:
            self.wait_running(r, timeout_s=180)
        if not self.wait_fleet(after=time.monotonic() - 0.01, timeout_s=180):
            self.violations.append("no verifier replica of the autoscaler sent a running heartbeat within 180s")

    def start_scaler(self, wait: bool = True) -> Role:
        """``rlvr-actor autoscale --role verify`` by PID, in its own process group, as a Role of the skeleton
        (so ``Skeleton.signal``, ``reap`` and ``stop_all`` work on it); restarted only here, never by
        ``Skeleton.restart`` (which knows ``--role`` commands alone)."""
        role = self.sk.roles.get(SCALER) or Role("autoscale", SCALER, self.config("roles"))
        if role.proc is not None and role.proc.poll() is None:
            raise RuntimeError("the autoscaler is already running")
        role.expect_exit = False
        self.sk.roles[SCALER] = role
        env = dict(os.environ, OMP_NUM_THREADS="1", RLVR_RUN_DIR=str(self.root), PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        argv = [sys.executable, "-m", "rlvr.cli", "autoscale", "--role", "verify", "--config", str(role.config),
                "--nats", self.urls, "--log-dir", str(self.fleet_dir)]
        with open(self.sk.log_path(SCALER), "ab") as f:
            f.write(f"\n=== chaos: start #{role.starts + 1} of {SCALER} at {time.time():.3f}\n".encode())
            f.flush()
            role.proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=self.root,
                                         start_new_session=True)
        role.starts += 1
        self.scaler_starts += 1
        if wait and self.obs.wait_heartbeat(SCALER, after=time.monotonic() - 0.01, timeout_s=120) is None:
            self.violations.append(f"the autoscaler (start #{role.starts}) sent no heartbeat within 120s")
        return role

    def scaler_pid(self) -> int | None:
        role = self.sk.roles.get(SCALER)
        return role.proc.pid if role is not None and role.alive() else None

    def fleet_pids(self) -> dict[int, str]:
        """Every live process (not a zombie) started with the scaler's replica config: pid -> replica name."""
        import psutil

        key, out = str(self.fleet_config), {}
        for p in psutil.process_iter(["pid", "cmdline", "status"]):
            cmd = p.info["cmdline"] or []
            if key in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
                out[p.info["pid"]] = cmd[cmd.index("--replica") + 1] if "--replica" in cmd[:-1] else "?"
        return out

    def fleet_running(self, after: float) -> set[str]:
        """The scaler's replicas (``verify-<N>``) that sent a running heartbeat after monotonic ``after``."""
        return {r for r, (t, hb) in list(self.obs.heartbeats.items())
                if r.startswith("verify-") and r[7:].isdigit() and t > after and hb.state == "running"}

    def wait_fleet(self, after: float, timeout_s: float, n: int = 1) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.fleet_running(after)) >= n:
                return True
            time.sleep(0.1)
        return False

    # --- the runner's checks, with the scaler --------------------------------------------------
    def revive(self) -> list[str]:
        found = []
        role = self.sk.roles.get(SCALER)
        if role is not None and role.proc is not None and role.proc.poll() is not None and not role.expect_exit:
            found.append(f"{SCALER} exited {role.proc.returncode} unexpectedly: "
                         f"{self.sk.log_text(SCALER).strip()[-400:]}")
            self.sk.reap(SCALER)
            self.start_scaler()
        return found + super().revive()

    def all_alive(self, since: float, timeout_s: float = 30.0) -> list[str]:
        hung = super().all_alive(since, timeout_s)
        if not self.wait_fleet(after=since, timeout_s=timeout_s):
            hung.append(f"no verifier replica of the autoscaler sent a running heartbeat for {timeout_s}s")
        return hung

    def finish(self, timeout_s: float = 240.0) -> dict:
        self.set_slow(False)
        out = super().finish(timeout_s)
        out["scaler_starts"] = self.scaler_starts
        out["fleet_events"] = _count(e.get("event", "?") for e in self.events.poll())
        left = A.wait_gone(self, set(self.fleet_pids()), 30)
        if left:
            self.violations.append(f"replicas left running after the autoscaler was stopped: {left}")
        return out

    def close(self) -> None:
        self.set_slow(False)
        try:
            self.sk.stop_all()
        finally:
            for pid in self.fleet_pids():  # by PID: only processes with this scenario's replica config
                A.kill_pid(pid)
            if self.obs is not None:
                self.obs.close()


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in items:
        out[k] = out.get(k, 0) + 1
    return out


def autoscale_plan(rng: random.Random, quick: bool) -> list[tuple[str, object]]:
    """Quick: the scaler killed while it starts a replica, and a replica that never heartbeats (in a
    seeded order). Full: every kind 2-3 times, shuffled."""
    if quick:
        plan = [("autoscale:sigkill_scaling_up", A.sigkill_scaling_up),
                ("autoscale:replica_never_heartbeats", A.replica_never_heartbeats)]
    else:
        plan = [("autoscale:sigkill_scaling_up", A.sigkill_scaling_up)] * 3
        plan += [("autoscale:sigkill_draining", A.sigkill_draining)] * 3
        plan += [("autoscale:replica_never_heartbeats", A.replica_never_heartbeats)] * 2
        plan += [("autoscale:flapping_backlog", A.flapping_backlog)] * 3
        plan += [("autoscale:manual_replica", A.manual_replica)] * 2
    rng.shuffle(plan)
    return plan


def run_autoscale_scenario(root: Path, run: str, seed: int, quick: bool, only: list[str] = ()) -> dict:
    from bench.chaos.run import play, scenario_server

    rng = random.Random(seed)
    server = scenario_server(root, run)
    sc = AutoscaleScenario(root, run, seed=seed, servers=[server])
    records: list[dict] = []
    result: dict = {"scenario": "autoscale", "run": run, "seed": seed}
    try:
        sc.start()
        sc.start_sampling()
        records += play(sc, autoscale_plan(rng, quick), rng, only)
        result["finish"] = sc.finish()
    except Exception as e:  # the runner's own failure: kept with the faults done so far
        traceback.print_exc()
        sc.violations.append(f"the runner failed: {type(e).__name__}: {e}")
    finally:
        result["faults"] = records
        sc.close()
        server.kill()
        result["violations"] = sc.violations
    return result


__all__ = ["AutoscaleScenario", "run_autoscale_scenario"]
