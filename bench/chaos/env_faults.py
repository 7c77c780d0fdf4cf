"""The envs scenario's faults (env_scenario.py): each breaks the environments the episodes play
against, puts them back, and checks what the rollout made of it.

- ``openenv:server_killed_mid_episode``: the OpenEnv server is SIGKILLed while episodes are in
  session with it (its WebSocket connections established), then restarted on its port;
- ``openenv:silent_server``: the server is SIGSTOPped past the rollout's ``env_timeout_s`` (it
  accepts connections into the kernel's backlog, answers nothing), then SIGCONTed;
- ``verifiers:env_raises``: the verifiers environment's ``env_response`` raises for a few seconds;
- ``environment:tool_forks_and_hangs``: its ``env_response`` starts processes (with children of
  their own) and blocks its thread past ``env_timeout_s``.

Each checks, in the rollout replica's log after the fault began (``env_episode_ended``), that
episodes of the broken environment ended ``env_error``/``env_timeout`` (never a hang, never a
reward of 0); that the OpenEnv server is used again after it came back (new sessions: a slot the
adapter leaked would starve it); and, for the hang, that the rollout killed what the stuck steps
started (``env_children_killed``) and that no such process outlived it. Whether every failed
episode's sample was then dropped with a counted reason is checked at the end (``check_failed``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

from bench.chaos import env_episodes as E
from bench.chaos.skeleton import REPO

REPLICA = "rollout-0"
ENV_TIMEOUT_S = 6.0
FAILED = ("env_error", "env_timeout")


class QuizServer:
    """The OpenEnv quiz server (tests/openenv_quiz_server.py) under uvicorn, on a port kept across restarts."""

    def __init__(self, root: Path) -> None:
        self.log = root / "openenv-server.log"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout_s: float = 60.0) -> QuizServer:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "tests.openenv_quiz_server:app", "--host", "127.0.0.1", "--port",
                 str(self.port), "--log-level", "warning"], cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT,
                start_new_session=True)
        self.starts += 1
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.healthy():
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"the OpenEnv server exited {self.proc.returncode}; see {self.log}")
            time.sleep(0.2)
        raise RuntimeError(f"the OpenEnv server was not healthy within {timeout_s}s; see {self.log}")

    def healthy(self) -> bool:
        try:
            return urllib.request.urlopen(self.url + "/health", timeout=0.5).status == 200
        except OSError:
            return False

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGCONT)
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(15)

    def sessions(self) -> int:
        """Established connections to the server's port (episodes in session with it)."""
        try:
            conns = psutil.Process(self.proc.pid).net_connections(kind="tcp")
        except (psutil.Error, AttributeError):
            return 0
        return sum(1 for c in conns if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == self.port)

    def wait_sessions(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.sessions() > 0:
                return True
            time.sleep(0.05)
        return False


# --- the rollout's log ----------------------------------------------------------------------------------
def log_offset(sc) -> int:
    p = sc.sk.log_path(REPLICA)
    return p.stat().st_size if p.exists() else 0


def log_events(sc, offset: int, event: str) -> list[dict]:
    p = sc.sk.log_path(REPLICA)
    with open(p, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    out = []
    for line in text.splitlines():
        if f'"{event}"' in line:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def ended(sc, offset: int, kind: str) -> list[dict]:
    """``env_episode_ended`` lines since ``offset`` for episodes of ``kind``'s environment."""
    return [e for e in log_events(sc, offset, "env_episode_ended")
            if E.kind_of(str(e.get("episode", "")).rsplit("/", 1)[0]) == kind]


def _wait_ended(sc, offset: int, kind: str, timeout_s: float) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        got = [e for e in ended(sc, offset, kind) if e.get("reason") in FAILED]
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.3)


def _reasons(events: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in events:
        out[e.get("reason", "?")] = out.get(e.get("reason", "?"), 0) + 1
    return out


def _record(sc, kind: str, label: str, offset: int, events: list[dict], **detail) -> dict:
    sc.faulted.append((label, offset))
    alive = sc.sk.roles[REPLICA].alive()
    if not alive:
        sc.violations.append(f"{label}: the rollout exited ({sc.sk.log_text(REPLICA)[-300:]})")
    if not events:
        sc.violations.append(f"{label}: no {kind} episode ended env_error/env_timeout in {REPLICA}'s log")
    return {"kind": label, "ended": _reasons(events), "rollout_alive": alive, **detail}


def _used_again(sc, label: str, timeout_s: float = 40.0) -> float | None:
    """Seconds until episodes are in session with the OpenEnv server again (None: not within timeout_s)."""
    t0 = time.monotonic()
    if sc.openenv.wait_sessions(timeout_s):
        return round(time.monotonic() - t0, 2)
    sc.violations.append(f"{label}: no episode in session with the OpenEnv server {timeout_s}s after it came back")
    return None


# --- the faults -----------------------------------------------------------------------------------------
def server_killed(sc, rng) -> dict:
    label = "openenv:server_killed_mid_episode"
    offset = log_offset(sc)
    in_session = sc.openenv.wait_sessions(30)
    time.sleep(round(rng.uniform(0.0, 0.4), 2))
    sessions = sc.openenv.sessions()
    sc.openenv.kill()
    down = round(rng.uniform(0.5, 3.0), 2)
    time.sleep(down)
    sc.openenv.start()
    events = _wait_ended(sc, offset, "openenv", ENV_TIMEOUT_S * 3)
    again = _used_again(sc, label)
    return _record(sc, "openenv", label, offset, events, in_session=in_session, sessions_at_kill=sessions,
                   down_s=down, used_again_after_s=again)


def silent_server(sc, rng) -> dict:
    label = "openenv:silent_server"
    offset = log_offset(sc)
    in_session = sc.openenv.wait_sessions(30)
    silent = round(ENV_TIMEOUT_S + rng.uniform(2.0, 4.0), 2)
    sc.openenv.signal(signal.SIGSTOP)
    time.sleep(silent)
    sc.openenv.signal(signal.SIGCONT)
    events = _wait_ended(sc, offset, "openenv", ENV_TIMEOUT_S * 3)
    timeouts = sum(1 for e in events if e.get("reason") == "env_timeout")
    if events and not timeouts:
        sc.violations.append(f"{label}: the episodes that met the silent server ended {_reasons(events)}, "
                             "none env_timeout")
    again = _used_again(sc, label)
    return _record(sc, "openenv", label, offset, events, in_session=in_session, silent_s=silent,
                   used_again_after_s=again)


def verifiers_raises(sc, rng) -> dict:
    label = "verifiers:env_raises"
    offset = log_offset(sc)
    hold = round(rng.uniform(3.0, 6.0), 2)
    flag = sc.root / E.FLAG
    flag.write_text("raise")
    time.sleep(hold)
    flag.unlink()
    events = _wait_ended(sc, offset, "verifiers", ENV_TIMEOUT_S * 2)
    raised = [e for e in events if "chaos: the verifiers environment raised" in str(e.get("detail"))]
    if events and not raised:
        sc.violations.append(f"{label}: episodes ended {_reasons(events)}, none with the environment's error")
    return _record(sc, "verifiers", label, offset, events, held_s=hold, raised=len(raised))


def children(root: Path) -> list[psutil.Process]:
    """Processes the hung steps started (and theirs) for the scenario in ``root``."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if E.CHILD_TAG in cmd and str(root) in cmd:
            found.append(p)
    return found


def tool_forks_and_hangs(sc, rng) -> dict:
    label = "environment:tool_forks_and_hangs"
    offset = log_offset(sc)
    flag = sc.root / E.FLAG
    flag.write_text("hang")
    time.sleep(2.0)
    flag.unlink()
    events = _wait_ended(sc, offset, "verifiers", ENV_TIMEOUT_S * 3)
    time.sleep(3.0)  # the episodes hung with the first ones end too
    events = [e for e in ended(sc, offset, "verifiers") if e.get("reason") in FAILED]
    timeouts = sum(1 for e in events if e.get("reason") == "env_timeout")
    killed = sum(int(e.get("killed", 0)) for e in log_events(sc, offset, "env_children_killed"))
    ambiguous = len(log_events(sc, offset, "env_child_ambiguous"))
    left = children(sc.root)
    deadline = time.monotonic() + 10
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    if events and not timeouts:
        sc.violations.append(f"{label}: the hung episodes ended {_reasons(events)}, none env_timeout")
    if timeouts and not killed:
        sc.violations.append(f"{label}: {timeouts} episodes timed out and the rollout killed none of their processes")
    if left:
        sc.violations.append(f"{label}: {len(left)} processes the hung steps started outlived their episodes "
                             f"({ambiguous} left alone as ambiguous): {[p.pid for p in left]}")
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
    return _record(sc, "verifiers", label, offset, events, killed=killed, ambiguous=ambiguous, outlived=len(left))


FAULTS = {"openenv:server_killed_mid_episode": server_killed, "openenv:silent_server": silent_server,
          "verifiers:env_raises": verifiers_raises, "environment:tool_forks_and_hangs": tool_forks_and_hangs}


def check_failed(sc) -> tuple[dict, list[str]]:
    """Every episode the rollout logged as failed (any start of it): its sample dropped with a reason by a
    committed entry, or trained once only where SCORED holds another copy of it (its task played again)."""
    from collections import Counter

    from bench.chaos.invariants import read_committed

    failed = {str(e.get("episode")): e.get("reason") for e in log_events(sc, 0, "env_episode_ended")}
    trained: set[str] = set()
    dropped: dict[str, str] = {}
    for e in read_committed(sc.out).entries:
        trained.update(e.trained)
        dropped.update(e.dropped)
    copies = Counter(c.sample_id for c in sc.obs.read_scored().values())
    fates: Counter[str] = Counter()
    found = []
    for episode, reason in failed.items():
        if episode in dropped:
            fates[f"{reason}:dropped:{dropped[episode]}"] += 1
        elif episode in trained and copies[episode] > 1:
            fates[f"{reason}:trained_replayed"] += 1
        elif episode in trained:
            fates[f"{reason}:trained"] += 1
            found.append(f"the failed episode {episode} ({reason}) was trained")
        else:
            fates[f"{reason}:unsettled"] += 1
            found.append(f"the failed episode {episode} ({reason}) was never dropped with a reason")
    return dict(fates), found
