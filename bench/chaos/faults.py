"""The faults: each injects one thing into a running ``Scenario``, puts the
skeleton back the way an operator (or a supervisor) would, and returns what
it saw. Judging custody and progress is the runner's job, after each fault.

Every fault takes the scenario and a seeded ``random.Random``; the same seed
gives the same kill points, pause lengths and orders. Production code has no
test hooks: the windows are hit from outside. The commit window (after
``learner.json`` is written, before ``latest`` is flipped) and the engine
save are caught by watching the checkpoint directory with a tight poll and
freezing the learner (SIGSTOP) the moment the file appears; whether the
window was really hit is then read off the disk before the SIGKILL, and
reported (``hit``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from nats.js import api

from bench.chaos.invariants import read_committed
from bench.chaos.scenario import ACK_WAIT_S, Scenario
from rlvr.protocol.subjects import KV_LEARNER_LEASE


def _result(kind: str, **detail) -> dict:
    return {"kind": kind, **detail}


# --- SIGKILL ------------------------------------------------------------------------
def kill_learner_seeded(sc: Scenario, rng) -> dict:
    delay = round(rng.uniform(0.2, 3.0), 2)
    time.sleep(delay)
    steps = sc.learner_steps_logged()
    sc.sk.signal("learn-0", signal.SIGKILL)
    rc = sc.sk.wait_exit("learn-0", 30)
    sc.start_learner()
    return _result("sigkill:learn", after_s=delay, steps_since_start=steps, rc=rc)


def kill_learner_before_first_checkpoint(sc: Scenario, rng) -> dict:
    """Needs a learner started with a checkpoint_every it will not reach; restarts it with the normal one."""
    want = rng.randint(1, 4)
    deadline = time.monotonic() + 180
    while sc.learner_steps_logged() < want and time.monotonic() < deadline:
        time.sleep(0.05)
    sc.sk.signal("learn-0", signal.SIGKILL)
    rc = sc.sk.wait_exit("learn-0", 30)
    hit = not (sc.out / "checkpoints" / "latest").exists()
    steps = sc.learner_steps_logged()
    sc.start_learner()
    return _result("sigkill:learn:before_first_checkpoint", steps=steps, hit=hit, rc=rc)


def _freeze_on(sc: Scenario, path: Path, timeout_s: float, still, early: Path | None = None) -> bool | None:
    """Busy-wait for ``path``; SIGSTOP the learner the moment it exists. Returns ``still()`` read while
    frozen (True: the window is open), or None if the path never appeared.

    ``early`` (the temporary file the atomic write renames into ``path``) is a first stop: frozen
    there, the learner is a few instructions from the rename, so the second wait is short and the
    freeze lands inside the window far more often on a loaded machine."""
    pid = sc.sk.roles["learn-0"].proc.pid
    deadline = time.monotonic() + timeout_s
    exists = os.path.exists
    if early is not None:
        while not exists(early) and not exists(path):
            if time.monotonic() > deadline:
                return None
        os.kill(pid, signal.SIGSTOP)
        if exists(path):
            return still()
        os.kill(pid, signal.SIGCONT)
    while not exists(path):
        if time.monotonic() > deadline:
            return None
    os.kill(pid, signal.SIGSTOP)
    return still()


def kill_learner_in_commit_window(sc: Scenario, rng) -> dict:
    """SIGKILL after commit-N/learner.json is written and before ``latest`` names commit-N.

    On a tmpfs (the checkpoint disk of the skeleton) fsync is free and that window is a few
    syscalls wide, so the learner is traced with strace for the duration, each rename delayed
    by ``delay_s`` on its way out: learner.json is then in place for that long before the
    ledger entry and ``latest`` follow. Production code is unchanged; without strace the
    poll alone is tried and ``hit`` says whether it landed."""
    root = sc.out / "checkpoints"
    st = read_committed(sc.out).state
    n = (st.commits if st else 0) + 2  # not the next commit: it may be under way already
    target = root / f"commit-{n:06d}" / "learner.json"
    pid = sc.sk.roles["learn-0"].proc.pid
    delay_us = 1_000_000
    tracer = None
    if shutil.which("strace"):
        calls = "rename,renameat,renameat2"
        tracer = subprocess.Popen(["strace", "-f", "-qq", "-p", str(pid), "-e", f"trace={calls}",
                                   "-e", f"inject={calls}:delay_exit={delay_us}", "-o", os.devnull],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def window_open() -> bool:
        try:
            return (root / "latest").read_text().strip() != f"commit-{n:06d}"
        except FileNotFoundError:
            return True

    try:
        hit = _freeze_on(sc, target, 60, window_open, early=target.with_name("learner.json.tmp"))
        ledger_written = (root / "ledger" / f"commit-{n:06d}.json").exists()
        sc.sk.signal("learn-0", signal.SIGKILL)
        sc.sk.signal("learn-0", signal.SIGCONT)
        rc = sc.sk.wait_exit("learn-0", 30)
    finally:
        if tracer is not None:
            if tracer.poll() is None:
                tracer.kill()
            tracer.wait()
    sc.start_learner()
    return _result("sigkill:learn:commit_window", commit=n, hit=bool(hit), ledger_entry_written=ledger_written,
                   rc=rc, renames_delayed_s=delay_us / 1e6 if tracer else 0)


def kill_role(sc: Scenario, rng, replica: str) -> dict:
    delay = round(rng.uniform(0.1, 2.0), 2)
    time.sleep(delay)
    sc.sk.signal(replica, signal.SIGKILL)
    rc = sc.sk.wait_exit(replica, 30)
    sc.sk.restart(replica)
    sc.wait_running(replica, timeout_s=180)
    return _result(f"sigkill:{replica.split('-')[0]}", replica=replica, after_s=delay, rc=rc)


# --- SIGSTOP ------------------------------------------------------------------------
def stop_role(sc: Scenario, rng, replica: str, factor: float) -> dict:
    pause = factor * ACK_WAIT_S
    sc.sk.signal(replica, signal.SIGSTOP)
    time.sleep(pause)
    sc.sk.signal(replica, signal.SIGCONT)
    resumed = time.monotonic()
    hb = sc.obs.wait_heartbeat(replica, after=resumed, timeout_s=20)
    return _result(f"sigstop:{replica.split('-')[0]}:{factor}x_ack_wait", replica=replica, paused_s=pause,
                   heartbeat_after_resume=hb is not None)


# --- the server -----------------------------------------------------------------------
def kill_server(sc: Scenario, rng, index: int = 0) -> dict:
    srv = sc.servers[index]
    down = round(rng.uniform(0.5, 4.0), 2)
    srv.kill(signal.SIGKILL)
    time.sleep(down)
    srv.start()
    return _result("sigkill:nats-server", server=srv.name, down_s=down, port=srv.port)


def store_full(sc: Scenario, rng) -> dict:
    """Fill the JetStream store (the server's max_file_store) with another stream, hold, free it."""
    name = f"CHAOSFILL_{sc.run}"
    subject = f"chaosfill.{sc.run}"
    hold = round(rng.uniform(3.0, 6.0), 2)

    async def fill():
        js = sc.obs.js
        await js.add_stream(api.StreamConfig(name=name, subjects=[subject], storage=api.StorageType.FILE))
        chunk = os.urandom(512 * 1024)
        n, err = 0, ""
        while n < 4096:
            try:
                await js.publish(subject, chunk, timeout=5)
                n += 1
            except Exception as e:  # noqa: BLE001 (the point: the store refuses)
                err = f"{type(e).__name__}: {e}"
                break
        return n, err

    n, err = sc.obs.call(fill(), timeout_s=300)
    time.sleep(hold)
    alive_while_full = [r for r in sc.replicas if sc.sk.roles[r].alive()]
    sc.obs.call(sc.obs.js.delete_stream(name), timeout_s=20)
    return _result("jetstream:store_full", filled_mib=n / 2, refused_with=err[:200], held_s=hold,
                   alive_while_full=alive_while_full)


def delete_consumer(sc: Scenario, rng, kind: str, durable: str) -> dict:
    owner = {"rollout": "rollout-0", "verify": sc.verifiers[0], "learn": "learn-0"}[durable]
    deleted = sc.obs.delete_consumer(kind, durable)
    t0 = time.monotonic()
    time.sleep(8.0)
    exited = {r: sc.sk.roles[r].proc.returncode for r in sc.replicas if not sc.sk.roles[r].alive()}
    back = sc.obs.consumer_info(kind, durable) is not None
    action = "none"
    if not back:  # the learner, the topology's owner, recreates every durable (issue 38)
        sc.violations.append(f"consumer {durable} deleted: not recreated by its owner within 8 s; exited: {exited}")
        if durable == "learn":
            action = "learner restarted (it recreates its consumer at its floor)"
            sc.sk.reap("learn-0")
            sc.start_learner()
        else:
            action = "rlvr-actor init"
            init = subprocess.run([sys.executable, "-m", "rlvr.cli", "init", "--config", str(sc.config("roles")),
                                   "--nats", sc.urls], capture_output=True, text=True, timeout=120,
                                  cwd=sc.root, env=dict(os.environ, OMP_NUM_THREADS="1"))
            if init.returncode != 0:
                sc.violations.append(f"rlvr-actor init failed after a consumer was deleted: {init.stderr[-500:]}")
    logs = {r: _last_error(sc.sk.log_text(r)) for r in exited}
    for r in exited:
        if r != "learn-0" or durable != "learn":
            sc.sk.roles[r].expect_exit = False
            sc.sk.restart(r)
            sc.wait_running(r, timeout_s=180)
    return _result(f"consumer_deleted:{durable}", deleted=deleted, owner=owner, exited=exited,
                   came_back_by_itself=back, recovery=action, errors=logs, seconds=round(time.monotonic() - t0, 1))


def delete_stream(sc: Scenario, rng, kind: str) -> dict:
    """Delete a work-queue stream (its durable goes with it) mid-run: the learner, its owner,
    recreates both within a few heartbeats and nobody exits (repair without an operator). What
    the stream held is gone: tasks free their feeder slots after the task timeout, samples'
    groups expire as partial; neither was on SCORED, so custody has nothing to lose."""
    before = sc.obs.stream_state(kind)
    held = before.state.messages if before else None
    sc.obs.call(sc.obs.js.delete_stream(sc.obs.names.stream(kind)), timeout_s=20)
    durable = {"TASKS": "rollout", "ROLLOUTS": "verify"}[kind]
    t0 = time.monotonic()
    back = None
    while time.monotonic() - t0 < 60:
        if sc.obs.stream_state(kind) is not None and sc.obs.consumer_info(kind, durable) is not None:
            back = round(time.monotonic() - t0, 2)
            break
        time.sleep(0.2)
    exited = {r: sc.sk.roles[r].proc.returncode for r in sc.replicas if not sc.sk.roles[r].alive()}
    if back is None:
        sc.violations.append(f"stream {kind} deleted: its owner did not recreate it and its durable within 60 s")
    if exited:
        sc.violations.append(f"stream {kind} deleted: {sorted(exited)} exited instead of waiting for the repair")
    return _result(f"stream_deleted:{kind}", messages_lost=held, recreated_after_s=back, exited=exited)


def delete_kv_bucket(sc: Scenario, rng) -> dict:
    """Delete the run's KV bucket (the learner's lease, progress and resolved config) mid-run: the
    learner recreates it at its next repair pass and takes its lease again (it must not read the
    missing key as another learner's and stop), and its progress comes back with its next write."""
    bucket = sc.obs.names.kv_bucket
    sc.obs.call(sc.obs.js.delete_key_value(bucket), timeout_s=20)
    t0 = time.monotonic()
    back = None
    while time.monotonic() - t0 < 60:
        kv = sc.obs.try_call(sc.obs.js.key_value(bucket), timeout_s=5)
        if kv is not None and sc.obs.try_call(kv.get(KV_LEARNER_LEASE), timeout_s=5) is not None:
            back = round(time.monotonic() - t0, 2)
            break
        time.sleep(0.2)
    alive = sc.sk.roles["learn-0"].alive()
    if back is None:
        sc.violations.append("kv bucket deleted: the learner did not recreate it and its lease within 60 s")
    if not alive:
        sc.violations.append(f"kv bucket deleted: the learner exited ({_last_error(sc.sk.log_text('learn-0'))})")
    return _result("kv_deleted", lease_back_after_s=back, learner_alive=alive)


def environment_fault(sc: Scenario, rng, mode: str) -> dict:
    """The run's environment (bench/chaos/episodes.py) raises, or hangs in a step after forking a
    child, for a few seconds: episodes end ``env_error`` / ``env_timeout``, their samples are
    dropped as ``verify_failed`` (counted), the rollout carries on. Children the hung steps
    forked and left behind are counted (``orphans``), then killed by PID."""
    import psutil

    from bench.chaos.episodes import CHILD_TAG, HANG_S

    flag = sc.root / "chaos-env"
    hold = round(rng.uniform(3.0, 6.0), 2) if mode == "raise" else 2.0
    flag.write_text(mode)
    time.sleep(hold)
    flag.unlink()
    if mode == "hang":
        time.sleep(HANG_S + 5)  # the steps that hung come back
    orphans = [p for p in psutil.process_iter(["cmdline"]) if CHILD_TAG in (p.info["cmdline"] or [])]
    for p in orphans:
        try:
            p.kill()
        except psutil.Error:
            pass
    alive = sc.sk.roles["rollout-0"].alive()
    if not alive:
        sc.violations.append(f"the environment fault {mode} took the rollout down")
    return _result(f"environment:{mode}", held_s=hold, rollout_alive=alive, orphans=len(orphans))


def _last_error(log: str) -> str:
    from bench.chaos.scenario import failure_of

    return failure_of(log)


# --- the learner's edges --------------------------------------------------------------
def second_learner(sc: Scenario, rng) -> dict:
    cfg = sc.config("learn-intruder", learn={"out_dir": str(sc.root / "intruder-out")})
    sc.sk.start("learn", "learn-intruder", cfg)
    rc = sc.sk.wait_exit("learn-intruder", 120)
    log = sc.sk.log_text("learn-intruder")
    named = "already has a learner" in log and "learn-0" in log
    if rc is None:
        sc.sk.reap("learn-intruder")
    sc.sk.roles.pop("learn-intruder")
    ok = rc not in (0, None) and named and sc.sk.roles["learn-0"].alive()
    if not ok:
        sc.violations.append(f"a second learner was not refused cleanly (rc={rc}, holder named={named})")
    return _result("second_learner", rc=rc, refused_naming_holder=named, holder_alive=sc.sk.roles["learn-0"].alive())


def _fill_disk(filler: Path) -> int:
    """Write zeros to ``filler`` until its file system refuses (ENOSPC), to the last few KiB. Bytes written.

    Unbuffered (``os.write``): a buffered file would raise ENOSPC again when closed."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for block in (1 << 20, 4096):
            try:
                while True:
                    os.write(fd, b"\0" * block)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler.stat().st_size


def checkpoint_disk_full(sc: Scenario, rng) -> dict:
    """Fill the learner's out_dir (a small tmpfs the runner mounted) and free it after a while."""
    hold = round(rng.uniform(3.0, 8.0), 2)
    filler = sc.out / "chaos-filler"
    _fill_disk(filler)
    time.sleep(hold)
    role = sc.sk.roles["learn-0"]
    filler.unlink()
    # A learner that met the full disk may still be on its way out when the space comes back: its fate
    # is whichever comes first, a commit after the space is back, or its exit (the runner restarts it).
    floor = sc.committed_floor()
    deadline = time.monotonic() + 60.0
    while role.alive() and sc.committed_floor() <= floor and time.monotonic() < deadline:
        time.sleep(0.1)
    rc = role.proc.returncode if not role.alive() else None
    err = _last_error(sc.sk.log_text("learn-0")) if rc is not None else ""
    if rc is not None:
        role.expect_exit = False
        sc.start_learner()
    return _result("checkpoint_disk_full", held_s=hold, learner_exit=rc, learner_error=err)


def nats_store_disk_full(sc: Scenario, rng) -> dict:
    """Fill the file system of the server's store directory (a tmpfs the runner mounted) to ENOSPC, hold, free.

    Not the JetStream limit (``jetstream:store_full``): the disk under nats-server refuses its writes.
    nats-server (>= 2.14, nats-io/nats-server#7788) then latches the error on each stream that failed a
    write: the stream takes no more writes (publishes get no ack) and ``/healthz`` answers 503 naming it
    until the server restarts, even after the space is freed. So the runner does what the shipped
    deployments do (ops/k8s/nats.yaml's livenessProbe on /healthz): once the space is free, a server
    whose /healthz still fails for a write error is restarted. The roles must ride it out on their own.
    """
    srv = sc.servers[0]
    hold = round(rng.uniform(3.0, 6.0), 2)
    filler = srv.store / "chaos-filler"
    filled = _fill_disk(filler)
    time.sleep(hold)
    health_full = srv.healthz() if srv.monitor_port else (None, "")
    filler.unlink()
    restarted = ""
    if not srv.alive():  # a finding: the server died of a full disk; restarted as a supervisor would
        sc.violations.append(f"nats-server exited when its store's disk was full (see {srv.log})")
        srv.start()
        restarted = "exited"
    elif srv.monitor_port:
        status, body = srv.healthz()
        if status != 200 and "write error" in body:  # the liveness probe's verdict
            srv.kill(signal.SIGTERM)
            srv.start()
            restarted = f"liveness: {body[:160]}"
    return _result("nats_store_disk_full", filled_mib=round(filled / (1 << 20), 1), held_s=hold,
                   healthz_while_full=health_full[0], restarted=restarted)


def retention_gap(sc: Scenario, rng) -> dict:
    """The learner is down while SCORED's retention removes samples it never settled."""
    sc.sk.signal("learn-0", signal.SIGKILL)
    sc.sk.wait_exit("learn-0", 30)
    scored = sc.obs.read_scored()
    floor = sc.committed_floor()
    # The rollout and verifiers finish what the feeder issued; then purge as max_age would.
    time.sleep(3.0)
    scored = sc.obs.read_scored()
    info = sc.obs.stream_state("SCORED")
    # Purge past the first sample the learner never settled: sequences above the floor that
    # it did settle are no gap (the learner rightly goes on), so a cut among them tests nothing.
    state = read_committed(sc.out).state
    settled = set(state.ledger.settled.values()) if state else set()
    unsettled = next((q for q in range(floor, info.state.last_seq + 1) if q not in settled), None)
    if unsettled is None:
        sc.start_learner()
        return _result("retention_gap", floor=floor, skipped="every retained sample was already settled")
    cut = min(info.state.last_seq + 1, unsettled + rng.randint(1, 8))
    sc.retention_purged |= {c.sample_id for c in scored.values() if c.seq < cut}
    sc.obs.purge("SCORED", upto_seq=cut)
    sc.start_learner(wait=False)
    rc = sc.sk.wait_exit("learn-0", 120)
    log = sc.sk.log_text("learn-0")
    said = "were removed by SCORED's retention" in log and "allow_retention_gap" in log
    if rc in (0, None) or not said:
        sc.violations.append(f"a learner past a retention gap did not stop with the count (rc={rc})")
    sc.learn_extra["allow_retention_gap"] = True
    sc.start_learner()
    return _result("retention_gap", floor=floor, purged_below_seq=cut, stopped_rc=rc, said_how_many=said)


def copy_logs(sc: Scenario, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for p in sc.root.glob("*.log"):
        shutil.copy(p, dest / p.name)
