"""The autoscale scenario's faults (autoscale_scenario.py): each breaks the scaler or its fleet.

Each takes the scenario and a seeded ``random.Random`` and returns what it saw; custody, progress
and liveness are the runner's checks after it. The moments are caught from outside, as the other
faults do: ``autoscale.jsonl`` is polled every 5 ms and the fault acts on the line it waits for
(a replica ``started``, one ``draining``).

What the project promises, and what is checked:

- the scaler's replicas follow it (``actors/lifeline.py``: ``RLVR_UP_PID`` is the scaler's pid, so
  each replica asks for SIGTERM when it dies, and one started just before it died sends itself the
  signal): SIGKILL the scaler and every replica it ran drains and exits within the drain deadline,
  none is left orphaned, their messages are finished or redelivered;
- a restarted scaler starts ``min_replicas`` again, with names no live replica has;
- a replica that never heartbeats is killed and replaced ``startup_grace_s`` after its start (or,
  if the scaler drains it first, killed ``drain_deadline_s`` after its SIGTERM);
- steps up are ``scale_up_cooldown_s`` apart, steps down ``scale_down_stabilization_s`` apart and
  as long after a step up, never above ``max_replicas``;
- a replica started by hand beside the fleet is left alone (the scaler runs only its own).
"""

from __future__ import annotations

import os
import signal
import time

from bench.chaos.skeleton import Role


def _result(kind: str, **kw) -> dict:
    return {"kind": kind, **kw}


def kill_pid(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_gone(sc, pids: set[int], timeout_s: float) -> dict[int, str]:
    """The pids still alive after ``timeout_s`` (pid -> replica), SIGKILLed by PID so nothing outlives the fault."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    names = sc.fleet_pids()
    left = {p: names.get(p, "?") for p in pids if alive(p)}
    for p in left:
        kill_pid(p)
    return left


def settle(sc, timeout_s: float = 180.0) -> float | None:
    """The backlog off, then wait until the scaler serves ``min_replicas`` with nothing draining (the
    scaler's heartbeat says so): a fault that needs a step up must not start at ``max_replicas``.
    Seconds it took, None if it did not settle: on a loaded machine the backlog can stay above the
    step-down line for minutes (the fault is then recorded as not hit). A scaler that keeps more than
    ``min_replicas`` while its heartbeats show an empty backlog for 30 s is a violation."""
    from bench.chaos.autoscale_scenario import AUTOSCALE

    sc.set_slow(False)
    t0 = time.monotonic()
    empty_since = None
    while time.monotonic() - t0 < timeout_s:
        hb = sc.obs.wait_heartbeat("autoscale-verify", after=time.monotonic() - 0.01, timeout_s=5)
        if hb is None:
            continue
        if hb.gauges.get("replicas") == AUTOSCALE["min_replicas"] and not hb.gauges.get("draining"):
            return round(time.monotonic() - t0, 2)
        empty = not hb.gauges.get("backlog") and not hb.gauges.get("draining")
        empty_since = (empty_since or time.monotonic()) if empty else None
        if empty_since is not None and time.monotonic() - empty_since > 30.0:
            sc.violations.append(f"autoscale: {hb.gauges.get('replicas')} replicas kept for 30 s with an empty "
                                 f"backlog (min {AUTOSCALE['min_replicas']})")
            return None
    return None


def _pid_of(ev: dict) -> int:
    return int(str(ev.get("detail", "")).split("pid ")[-1])


def _kill_scaler_and_restart(sc, what: str) -> dict:
    """SIGKILL the scaler, restart it at once (as a supervisor would), then check its old replicas:
    every one exits within the drain deadline (the lifeline), and no new replica takes the name of
    an old one still running."""
    old_pid = sc.scaler_pid()
    sc.sk.roles["autoscale-verify"].expect_exit = True
    kill_pid(old_pid)
    rc = sc.sk.wait_exit("autoscale-verify", 30)
    old = sc.fleet_pids()  # pid -> name: what the killed scaler ran
    sc.set_slow(False)
    mark = len(sc.events.poll())
    t0 = time.monotonic()
    sc.start_scaler(wait=False)
    collisions: list[str] = []
    deadline = t0 + sc.drain_deadline_s + 20
    while time.monotonic() < deadline:
        live_old = {name for pid, name in old.items() if alive(pid)}
        for ev in sc.events.poll()[mark:]:
            if ev.get("event") == "started" and ev.get("replica") in live_old:
                collisions.append(f"{ev['replica']} started while the old {ev['replica']} still ran")
        mark = len(sc.events.events)
        if not live_old:
            break
        time.sleep(0.05)
    gone_s = round(time.monotonic() - t0, 2)
    orphans = wait_gone(sc, set(old), 0)
    if orphans:
        sc.violations.append(f"{what}: replicas of the SIGKILLed autoscaler still ran {gone_s}s later "
                             f"(orphans, killed by the runner): {orphans}")
    if collisions:
        sc.violations.append(f"{what}: the restarted autoscaler reused a running replica's name: {collisions}")
    if sc.obs.wait_heartbeat("autoscale-verify", after=t0, timeout_s=120) is None:
        sc.violations.append(f"{what}: the restarted autoscaler sent no heartbeat within 120s")
    return {"scaler_rc": rc, "old_replicas": sorted(old.values()), "old_gone_after_s": gone_s,
            "orphans": len(orphans), "name_collisions": collisions}


def sigkill_scaling_up(sc, rng) -> dict:
    """SIGKILL the scaler the moment it has started a replica on a rising backlog."""
    settled = settle(sc)
    if settled is None:  # still above min_replicas: a step up may be impossible (at max); not a finding
        return _result("autoscale:sigkill_scaling_up", hit=False, unsettled=True)
    mark = len(sc.events.poll())
    sc.set_slow(True)
    ev = sc.events.wait(lambda e: e.get("event") == "started", mark, timeout_s=90)
    if ev is None:
        sc.set_slow(False)
        sc.violations.append("autoscale:sigkill_scaling_up: no replica was started within 90s of a backlog")
        return _result("autoscale:sigkill_scaling_up", hit=False)
    new_pid = _pid_of(ev)
    out = _kill_scaler_and_restart(sc, "autoscale:sigkill_scaling_up")
    return _result("autoscale:sigkill_scaling_up", hit=True, settled_s=settled, starting=ev["replica"], starting_pid=new_pid,
                   starting_gone=not alive(new_pid), **out)


def sigkill_draining(sc, rng) -> dict:
    """Scale up under a backlog, clear it, SIGKILL the scaler the moment it drains a replica."""
    settled = settle(sc)
    mark = len(sc.events.poll())
    sc.set_slow(True)
    up = sc.events.wait(lambda e: e.get("event") == "started", mark, timeout_s=90)
    if up is not None:  # the new replica serves before the backlog clears, so there is one to drain
        sc.obs.wait_heartbeat(up["replica"], after=time.monotonic() - 60, timeout_s=60,
                              pred=lambda h: h.state == "running")
    time.sleep(round(rng.uniform(1.0, 3.0), 2))
    mark = len(sc.events.poll())
    sc.set_slow(False)
    ev = sc.events.wait(lambda e: e.get("event") == "draining", mark, timeout_s=90)
    if ev is None:
        sc.violations.append("autoscale:sigkill_draining: no replica was drained within 90s of the backlog clearing")
        return _result("autoscale:sigkill_draining", hit=False)
    out = _kill_scaler_and_restart(sc, "autoscale:sigkill_draining")
    return _result("autoscale:sigkill_draining", hit=True, settled_s=settled, draining=ev["replica"], **out)


def replica_never_heartbeats(sc, rng) -> dict:
    """SIGSTOP a replica the moment the scaler starts it: it never heartbeats. The backlog stays high
    (so no step down drains it first): the scaler must kill and replace it after ``startup_grace_s``."""
    from bench.chaos.autoscale_scenario import AUTOSCALE

    settled = settle(sc)
    if settled is None:  # still above min_replicas: a step up may be impossible (at max); not a finding
        return _result("autoscale:replica_never_heartbeats", hit=False, unsettled=True)
    mark = len(sc.events.poll())
    sc.set_slow(True)
    try:
        ev = sc.events.wait(lambda e: e.get("event") == "started", mark, timeout_s=90)
        if ev is None:
            sc.violations.append("autoscale:replica_never_heartbeats: no replica was started within 90s")
            return _result("autoscale:replica_never_heartbeats", hit=False)
        name, pid = ev["replica"], _pid_of(ev)
        t0 = time.monotonic()
        kill_pid(pid, signal.SIGSTOP)
        heard = sc.obs.last_heartbeat(name)
        heard = heard is not None and heard[0] >= t0 - 60
        grace = AUTOSCALE["dead_after_s"] if heard else AUTOSCALE["startup_grace_s"]
        limit = grace + sc.drain_deadline_s + 15  # a step down may pick it before the grace is out
        gone = sc.events.wait(lambda e: e.get("replica") == name and e.get("event") in ("replaced", "killed"),
                              mark, timeout_s=limit, poll_s=0.1)
        took = round(time.monotonic() - t0, 2)
    finally:
        sc.set_slow(False)
    still = alive(pid)
    if gone is None or still:
        kill_pid(pid)
        sc.violations.append(f"autoscale:replica_never_heartbeats: {name} (pid {pid}, stopped at start) was not "
                             f"killed by the autoscaler within {limit:.0f}s (event {gone}, alive {still})")
    return _result("autoscale:replica_never_heartbeats", hit=True, settled_s=settled, replica=name, heartbeat_before_stop=heard,
                   outcome=gone and gone["event"], detail=gone and gone.get("detail"), after_s=took,
                   limit_s=limit)


def flapping_backlog(sc, rng) -> dict:
    """The backlog up and down every second or two, several times: the steps must keep the policy's spacing."""
    from bench.chaos.autoscale_scenario import AUTOSCALE

    mark = len(sc.events.poll())
    flips = rng.randint(4, 7)
    t0 = time.time()
    for i in range(2 * flips):
        sc.set_slow(i % 2 == 0)
        time.sleep(round(rng.uniform(0.6, 2.0), 2))
    sc.set_slow(False)
    time.sleep(AUTOSCALE["scale_down_stabilization_s"] + 3)
    decisions = [e for e in sc.events.poll()[mark:] if e.get("event") == "decision"]
    ups = [e["time"] for e in decisions if e["action"] == "up" and e["current"] >= AUTOSCALE["min_replicas"]]
    downs = [e["time"] for e in decisions if e["action"] == "down" and e["current"] <= AUTOSCALE["max_replicas"]]
    slack = 0.3
    found = []
    for a, b in zip(ups, ups[1:]):
        if b - a < AUTOSCALE["scale_up_cooldown_s"] - slack:
            found.append(f"two steps up {b - a:.2f}s apart (cool-down {AUTOSCALE['scale_up_cooldown_s']}s)")
    for a, b in zip(downs, downs[1:]):
        if b - a < AUTOSCALE["scale_down_stabilization_s"] - slack:
            found.append(f"two steps down {b - a:.2f}s apart (stabilization {AUTOSCALE['scale_down_stabilization_s']}s)")
    for d in downs:
        prev = [u for u in ups if u <= d]
        if prev and d - prev[-1] < AUTOSCALE["scale_down_stabilization_s"] - slack:
            found.append(f"a step down {d - prev[-1]:.2f}s after a step up")
    over = [e for e in decisions if e["target"] > AUTOSCALE["max_replicas"]]
    if over:
        found.append(f"targets above max_replicas: {over[:3]}")
    sc.violations += [f"autoscale:flapping_backlog: {f}" for f in found]
    return _result("autoscale:flapping_backlog", flips=flips, window_s=round(time.time() - t0, 1), ups=len(ups),
                   downs=len(downs), thrash=found)


def manual_replica(sc, rng) -> dict:
    """A verifier started by hand (``rlvr-actor --role verify``) beside the scaler's, through a backlog
    and its clearing: the scaler must leave it alone; then it is stopped with SIGTERM and exits 0."""
    name = "verify-manual"
    mark = len(sc.events.poll())
    sc.sk.start("verify", name, sc.config("roles"))
    ok = sc.wait_running(name, timeout_s=120)
    sc.set_slow(True)
    time.sleep(round(rng.uniform(3.0, 5.0), 2))
    sc.set_slow(False)
    time.sleep(4.0)
    role: Role = sc.sk.roles[name]
    survived = role.alive()
    hb = sc.obs.last_heartbeat(name)
    touched = [e for e in sc.events.poll()[mark:] if e.get("replica") == name]
    role.expect_exit = True
    sc.sk.signal(name, signal.SIGTERM)
    rc = sc.sk.wait_exit(name, 60)
    if rc is None:
        sc.sk.reap(name)
    sc.sk.roles.pop(name)
    if not ok or not survived or touched or rc != 0:
        sc.violations.append(f"autoscale:manual_replica: running={ok} survived={survived} "
                             f"scaler events naming it={touched} SIGTERM rc={rc}")
    return _result("autoscale:manual_replica", survived=survived, stop_rc=rc, scaler_events_naming_it=len(touched),
                   acked=hb[1].counters.get("acked") if hb else None)
