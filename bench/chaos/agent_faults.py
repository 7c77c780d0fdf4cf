"""The agent faults: each breaks one agent episode on ``rollout-1`` (agent_scenario.py) and checks
what the rollout made of it.

A fault asks for itself through the flag file ``chaos-agent`` (bench/chaos/agent.py: the first agent
to start claims it, and says which episode it plays), then checks that:

- the episode ended with the expected reason, recorded in the replica's log
  (``agent_episode_ended``, with what happened in its detail);
- the agent and its supervisor are gone (no process left; they are reaped by PID, counted as a
  violation, if not);
- the replica is still up (``run_fault`` checks its heartbeat after every fault);
- the episode's sample reached SCORED (the fault ends there: a later one that kills the replica
  must not have the task played again, which would put another episode under its sample id).

The episode's sample must then be dropped with a counted reason, never trained as a 0: the
verifiers score an ``env_error``/``env_timeout`` episode outcome ``error``, and the learner drops it
(``verify_failed``). That is checked against the committed ledger at the end of the scenario
(``check_faulted``), once every sample is settled.

``agent:sigkill_rollout`` is no agent's doing: the replica is SIGKILLed while agents run, and every
agent process it started must die with it (the supervisor dies with the rollout and takes the
agent's process group with it); its tasks are redelivered and played again.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from urllib.parse import urlparse

import psutil

from bench.chaos import agent as am
from bench.chaos.skeleton import REPO

AGENT = REPO / "bench" / "chaos" / "agent.py"
REPLICA = "rollout-1"
CLAIM_TIMEOUT_S = 90.0  # an agent must start and claim: a Python start and `import openai` on a loaded machine
END_TIMEOUT_S = 60.0
# Endpoint sockets the replica may hold once a many_connections agent is gone: its listening socket and
# a keep-alive connection for each agent episode it runs (max_concurrent = 4), with room to spare.
LEFT_CONNECTIONS = 16
GONE_TIMEOUT_S = 20.0
# mode -> (end reason, text its detail must hold)
EXPECTED = {
    "sigkill_mid_request": ("env_error", "killed by signal 9"),
    "sigkill_mid_stream": ("env_error", "killed by signal 9"),
    "disconnect_mid_stream": ("env_error", "disconnected mid-stream"),
    "many_connections": ("env_error", "exited with status 3"),
    "wrong_key": ("env_error", "401"),
}


def agent_processes(root: Path, *, supervisors: bool = False) -> list[psutil.Process]:
    """Every process running bench/chaos/agent.py for the scenario in ``root`` (its ``CHAOS_DIR``: another
    chaos run on the machine has its own), with ``supervisors`` the supervisors that run one too."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        argv = p.info["cmdline"] or []
        if str(AGENT) in argv and (supervisors or "rlvr.rollout.agents.supervise" not in argv):
            try:
                if p.environ().get("CHAOS_DIR") == str(root):
                    found.append(p)
            except psutil.Error:  # gone, or not ours to read
                pass
    return found


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    """The pids still alive (not zombies) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p for p in pids if _alive(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill(pids: list[int]) -> None:
    for pid in pids:
        if pid <= 1:  # an agent's parent reads 1 once it is orphaned: never init
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _ask(sc, mode: str) -> dict | None:
    """Write the flag and wait for the agent that claims it; None (and a violation) if none did."""
    flag = sc.root / "chaos-agent"
    tmp = flag.with_suffix(".tmp")
    tmp.write_text(mode)
    tmp.rename(flag)
    deadline = time.monotonic() + CLAIM_TIMEOUT_S
    while time.monotonic() < deadline:
        for note in sc.root.glob("claim-*.json"):
            claim = json.loads(note.read_text())
            note.unlink()
            return claim
        time.sleep(0.05)
    flag.unlink(missing_ok=True)
    sc.violations.append(f"agent:{mode}: no agent episode started within {CLAIM_TIMEOUT_S}s to play it")
    return None


def ended(sc, episode: str, timeout_s: float = END_TIMEOUT_S) -> dict | None:
    """The replica's ``agent_episode_ended`` record of ``episode`` (None: not logged within ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for line in reversed(sc.sk.log_text(REPLICA).splitlines()):
            if '"agent_episode_ended"' in line and episode in line:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("episode") == episode:
                    return rec
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


def endpoint_connections(sc) -> int | None:
    """TCP sockets the agent replica holds on its endpoint's port (its listening socket included)."""
    port = None
    for line in reversed(sc.sk.log_text(REPLICA).splitlines()):
        if '"agent_endpoint"' in line:
            port = urlparse(json.loads(line)["url"]).port
            break
    try:
        conns = psutil.Process(sc.sk.roles[REPLICA].proc.pid).net_connections(kind="tcp")
    except psutil.NoSuchProcess:
        return None
    return sum(1 for c in conns if c.laddr and c.laddr.port == port)


def agent_fault(sc, rng, mode: str) -> dict:
    """One episode plays ``mode``; see the module docstring for what is checked."""
    conns = [endpoint_connections(sc)]  # before, while the agent holds its connections, after
    go = sc.root / "engine-go"
    try:
        claim = _ask(sc, mode)
        if claim is None:
            return {"kind": f"agent:{mode}", "claimed": False}
        pid, episode = claim["pid"], claim["episode"]
        held = None
        if mode == "sigkill_mid_request":
            held = _kill_mid_request(sc, pid, go)
        if mode == "many_connections":
            conns.append(_count_held(sc, pid))
        rec = ended(sc, episode)
    finally:
        go.touch()  # the engine's hold (sigkill_mid_request) never outlives the fault
    reason, detail = (rec or {}).get("reason"), (rec or {}).get("detail", "")
    want_reason, want_detail = EXPECTED[mode]
    if rec is None:
        sc.violations.append(f"agent:{mode}: episode {episode} logged no end within {END_TIMEOUT_S}s")
    elif reason != want_reason or want_detail not in detail:
        sc.violations.append(f"agent:{mode}: episode {episode} ended {reason} ({detail[:200]!r}); expected "
                             f"{want_reason} with {want_detail!r}")
    watched = [pid]
    if claim["ppid"] > 1:
        watched.append(claim["ppid"])
    else:  # its supervisor was gone before it started playing: it was never the rollout's to stop
        sc.violations.append(f"agent:{mode}: the agent of {episode} ran orphaned (parent {claim['ppid']}: its "
                             f"supervisor was gone before it claimed the fault)")
    left = _wait_gone(watched, GONE_TIMEOUT_S)
    if left:
        sc.violations.append(f"agent:{mode}: the agent or its supervisor is still running after its episode "
                             f"ended: {left}")
        _kill(left)
    # The fault is over once its sample is scored: a later fault that kills the replica must not have the
    # task played again (its replay would be another episode under the same sample id).
    scored = _wait_scored(sc, episode, END_TIMEOUT_S)
    if not scored:
        sc.violations.append(f"agent:{mode}: episode {episode}'s sample was not on SCORED within {END_TIMEOUT_S}s")
    if mode == "many_connections":  # the connections the agent held are closed with it
        deadline = time.monotonic() + 30
        while (n := endpoint_connections(sc)) is not None and n > LEFT_CONNECTIONS and time.monotonic() < deadline:
            time.sleep(0.2)
        conns.append(n)
        if n is not None and n > LEFT_CONNECTIONS:
            sc.violations.append(f"agent:many_connections: {REPLICA} still holds {n} connections on its endpoint "
                                 f"30 s after the agent died (counts before, while held, after: {conns})")
    sc.agent_faulted[episode] = mode
    return {"kind": f"agent:{mode}", "episode": episode, "end_reason": reason, "detail": detail[:300],
            "held_in_engine": held, "left_running": left, "endpoint_connections": conns, "scored": scored}


def _wait_scored(sc, sample_id: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if any(c.sample_id == sample_id for c in sc.obs.read_scored().values()):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def _count_held(sc, pid: int) -> int | None:
    """The replica's endpoint connections while the agent holds all of its own open."""
    opened = sc.root / f"opened-{pid}"
    deadline = time.monotonic() + 60
    while not opened.exists() and _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    n = endpoint_connections(sc)
    if not opened.exists():
        sc.violations.append("agent:many_connections: the agent never said it had its connections open")
    elif n is None or n < am.IDLE_SOCKETS + am.CLIENTS:
        sc.violations.append(f"agent:many_connections: {REPLICA} holds {n} endpoint connections while the agent "
                             f"holds {am.IDLE_SOCKETS + am.CLIENTS}")
    (sc.root / f"counted-{pid}").touch()
    opened.unlink(missing_ok=True)
    return n


def _kill_mid_request(sc, pid: int, go: Path) -> bool:
    """Hold the replica's engine, let the agent send its request, and SIGKILL the agent while the request
    waits in the engine. True when the request was seen sent and unanswered at the kill."""
    go.unlink(missing_ok=True)  # every generation on the replica now waits (the trivial engine's hold_file)
    (sc.root / f"armed-{pid}").touch()
    sent = sc.root / f"sent-{pid}"
    deadline = time.monotonic() + 30
    while not sent.exists() and _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    held = sent.exists() and _alive(pid)
    if held:  # the request is out; give it time to reach the endpoint and its generation to start waiting
        time.sleep(1.0)
        held = _alive(pid)
    if not held:
        sc.violations.append("agent:sigkill_mid_request: the agent's request was not seen held in the engine")
    _kill([pid])
    go.touch()
    for f in (sent, sc.root / f"armed-{pid}"):
        f.unlink(missing_ok=True)
    return held


def kill_rollout_with_agents(sc, rng) -> dict:
    """SIGKILL the agent replica while agents run: none may outlive it."""
    deadline = time.monotonic() + CLAIM_TIMEOUT_S
    mine: list[psutil.Process] = []  # the agents it runs (their supervisors are their parents)
    replica = sc.sk.roles[REPLICA].proc.pid
    while time.monotonic() < deadline:
        mine = [p for p in agent_processes(sc.root) if _descends_from(p, replica)]
        if mine:
            break
        time.sleep(0.1)
    pids = [p.pid for p in mine]
    for p in mine:
        try:
            pids.append(p.ppid())  # its supervisor
        except psutil.NoSuchProcess:
            pass
    hb = sc.obs.last_heartbeat(REPLICA)
    sc.agent_done += int(hb[1].counters.get("agent_end_done", 0)) if hb else 0
    sc.sk.signal(REPLICA, signal.SIGKILL)
    rc = sc.sk.wait_exit(REPLICA, 30)
    left = _wait_gone(pids, GONE_TIMEOUT_S)
    if not mine:
        sc.violations.append(f"agent:sigkill_rollout: no agent was running on {REPLICA} within {CLAIM_TIMEOUT_S}s")
    if left:
        sc.violations.append(f"agent:sigkill_rollout: {len(left)} agent processes outlived {REPLICA}: {left}")
        _kill(left)
    sc.sk.restart(REPLICA)
    sc.wait_running(REPLICA, timeout_s=180)
    return {"kind": "agent:sigkill_rollout", "agents_running": len(mine), "processes": len(pids), "rc": rc,
            "left_running": left}


def _descends_from(p: psutil.Process, ancestor: int) -> bool:
    try:
        return any(a.pid == ancestor for a in p.parents())
    except psutil.NoSuchProcess:
        return False


def check_faulted(sc) -> tuple[dict, list[str]]:
    """Every faulted episode's sample dropped with a reason by a committed entry, and none trained."""
    from bench.chaos.invariants import read_committed

    trained: set[str] = set()
    dropped: dict[str, str] = {}
    for e in read_committed(sc.out).entries:
        trained.update(e.trained)
        dropped.update(e.dropped)
    fates, found = {}, []
    for episode, mode in sc.agent_faulted.items():
        fates[episode] = "trained" if episode in trained else dropped.get(episode, "unsettled")
        if episode in trained:
            found.append(f"agent:{mode}: the failed episode {episode} was trained")
        elif episode not in dropped:
            found.append(f"agent:{mode}: the failed episode {episode} was never dropped with a reason")
    return fates, found
