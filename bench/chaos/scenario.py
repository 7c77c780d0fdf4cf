"""One chaos scenario: a server (or cluster), the role processes of one run,
the observer, and the checks made after each fault and at the end.

The skeleton is the cheapest one that crosses every hop: the learner runs dry
(no ``[learn.engine]``: custody, groups, checkpoints, no optimizer), the
rollout uses the ``trivial`` engine and the verifiers the ``exact`` one.
Groups per step is 1 and dynamic sampling is off, so every complete group is
one step: the end-of-run drain knows how many steps the leftovers need.

End of a scenario (``finish``): SIGTERM the learner (its uncommitted steps
will be replayed), let the rollout and verifiers empty TASKS and ROLLOUTS,
stop them, then restart the learner with ``steps`` set to what it has
committed plus the complete groups SCORED still holds, so that it trains
every published sample and exits 0. Only then the final checks run; the
tasks its feeder issued on the way out are counted apart (nobody consumes
them by design) and purged.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import defaultdict
from pathlib import Path

from bench.chaos.invariants import check_custody, check_streams, read_committed, read_floor
from bench.chaos.observe import Observer
from bench.chaos.skeleton import Server, Skeleton

ACK_WAIT_S = 2.0
BUS = {"ack_wait_s": ACK_WAIT_S, "heartbeat_every_s": 0.5, "nak_delay_s": 0.2, "drain_timeout_s": 2.0,
       "fetch_timeout_s": 0.3, "scored_max_bytes": 16 << 20, "dead_max_bytes": 8 << 20, "topology_wait_s": 120.0}
INJECTED_K = 10**6  # task numbers of messages the runner injects: the feeder never reaches them
EPISODES = "bench.chaos.episodes:Quiz"  # the run's multi-turn environment


def failure_of(log: str) -> str:
    """The error a role logged when it failed (its ``actor_failed`` line), else the log's last line."""
    import json

    for line in reversed(log.splitlines()):
        if '"actor_failed"' in line or '"cannot_connect"' in line:
            try:
                return str(json.loads(line).get("error", ""))[:400]
            except ValueError:
                return line[:400]
    tail = log.strip().splitlines()
    return tail[-1][:400] if tail else "(no log)"


def is_injected(task_id: str) -> bool:
    tail = task_id.rsplit("-t", 1)[-1]
    return not tail.isdigit() or int(tail) >= INJECTED_K


class Scenario:
    def __init__(self, root: Path, run: str, *, seed: int, servers: list[Server], verify_replicas: int = 2,
                 out_dir: Path | None = None, netns: str | None = None, bus: dict | None = None,
                 learn: dict | None = None) -> None:
        self.root, self.run, self.seed, self.servers = root, run, seed, servers
        self.out = out_dir or root / "learner-out"
        self.bus = {**BUS, **(bus or {})}
        self.learn_extra = learn or {}
        self.rollouts = ["rollout-0"]  # a scenario with more replicas (agent_scenario.py) lists them here
        self.urls = ",".join(s.url for s in servers)
        self.sk = Skeleton(root, run, self.urls, netns=netns)
        self.verifiers = [f"verify-{i}" for i in range(verify_replicas)]
        self.obs: Observer | None = None
        self.violations: list[str] = []
        self.floor_history: list[tuple[float, int]] = []
        self.dead_expected: dict[str, str] = {}
        self.dead_sizes: set[int] = set()
        self.retention_purged: set[str] = set()
        self.learner_gen = 0
        # (start, end) monotonic of every interval in which the committed floor stood still.
        self.gaps: list[tuple[float, float]] = []
        self._floor_since = time.monotonic()
        self._sampling = threading.Event()
        self._sampler: threading.Thread | None = None

    # --- configs -------------------------------------------------------------------
    def config(self, name: str, *, learn: dict | None = None, bus: dict | None = None,
               rollout: dict | None = None) -> Path:
        cfg = {
            "run": self.run, "seed": self.seed, "bus": {**self.bus, **(bus or {})},
            "observability": {"log_format": "json"},
            "learn": {"group_size": 4, "groups_per_step": 1, "steps": 1_000_000, "max_staleness": 1000,
                      "dynamic_sampling": False, "checkpoint_every": 3, "max_inflight_tasks": 4,
                      "group_timeout_s": 12.0, "lease_ttl_s": 2.0, "out_dir": str(self.out),
                      # Every task an episode of 1 to 3 turns (bench/chaos/episodes.py), scored by its environment.
                      "dataset": {"kind": "arithmetic", "verifier": {"name": "env"},
                                  "env": {"name": EPISODES, "max_turns": 4}},
                      **self.learn_extra, **(learn or {})},
            "rollout": {"engine": {"kind": "trivial", "accuracy": 0.5}, "max_inflight_tasks": 4,
                        "in_progress_every_s": 0.5, "environments": [EPISODES], "env_timeout_s": 10.0,
                        **(rollout or {})},
            "verify": {"pool_size": 1, "warm_verifiers": [], "concurrency": 4},
        }
        return self.sk.write_config(name, cfg)

    @property
    def replicas(self) -> list[str]:
        return ["learn-0", *self.rollouts, *self.verifiers]

    def rollout_config(self, replica: str) -> Path:
        """The config a rollout replica starts with (every one the same here)."""
        return self.config("roles")

    # --- start ---------------------------------------------------------------------
    def start_learner(self, *, config: Path | None = None, wait: bool = True) -> None:
        self.learner_gen += 1
        self.sk.start("learn", "learn-0", config or self.config("learn"))
        if wait:
            self.wait_running("learn-0", timeout_s=180)

    def start(self, *, learner_config: Path | None = None) -> None:
        """The learner first (it owns the topology), then the rollout and the verifiers."""
        self.obs = Observer(self.urls, self.run)
        self.start_learner(config=learner_config)
        cfg = self.config("roles")
        for r in self.rollouts:
            self.sk.start("rollout", r, self.rollout_config(r))
        for v in self.verifiers:
            self.sk.start("verify", v, cfg)
        for r in [*self.rollouts, *self.verifiers]:
            self.wait_running(r, timeout_s=180)

    def wait_running(self, replica: str, timeout_s: float, after: float | None = None) -> bool:
        after = time.monotonic() - 0.01 if after is None else after
        hb = self.obs.wait_heartbeat(replica, after=after, timeout_s=timeout_s, pred=lambda h: h.state == "running")
        if hb is None:
            self.violations.append(f"{replica} sent no running heartbeat within {timeout_s}s")
        return hb is not None

    # --- observations ----------------------------------------------------------------
    def committed_floor(self) -> int:
        return read_floor(self.out)[0]

    def start_sampling(self) -> None:
        """Watch the committed floor every 0.2 s in a thread: the stalls are the intervals it stands still.
        It also reads SCORED every second, so the checker sees every published copy."""
        self._sampling.set()

        def sample() -> None:
            last, ticks = None, 0
            while self._sampling.is_set():
                ticks += 1
                if ticks % 5 == 0:  # every second: SCORED's byte limit must not remove a copy before it is read
                    try:
                        self.obs.read_scored()
                    except Exception:  # noqa: BLE001 (a server the faults killed: the next read catches up)
                        pass
                try:
                    floor = read_floor(self.out)[0]
                except Exception:  # noqa: BLE001 (a read that failed this once: the next one decides)
                    floor = last
                now = time.monotonic()
                if floor != last:
                    if last is not None:
                        self.gaps.append((self._floor_since, now))
                    last, self._floor_since = floor, now
                time.sleep(0.2)

        self._sampler = threading.Thread(target=sample, daemon=True, name="chaos-floor")
        self._sampler.start()

    def stop_sampling(self) -> None:
        self._sampling.clear()
        if self._sampler is not None:
            self._sampler.join(5)

    def longest_stall(self, since: float) -> float:
        """The longest the floor stood still in an interval that ended after ``since`` (or still open)."""
        done = [end - start for start, end in self.gaps if end >= since]
        return round(max(done + [time.monotonic() - max(self._floor_since, since)]), 2)

    def committed_step(self) -> int:
        st = read_committed(self.out).state
        return st.step if st else 0

    def wait_progress(self, floor0: int, timeout_s: float) -> float | None:
        """Seconds until the committed floor passes ``floor0`` (None: it did not within ``timeout_s``).
        A role that exits meanwhile is restarted, as a supervisor would, and recorded."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            self.violations += self.revive()
            f = self.committed_floor()
            if f > floor0:
                self.floor_history.append((time.time(), f))
                return time.monotonic() - t0
            time.sleep(0.1)
        return None

    def learner_steps_logged(self) -> int:
        text = self.sk.log_text("learn-0")
        return text[text.rfind("=== chaos: start"):].count('"event": "step"')

    def revive(self) -> list[str]:
        """Restart every role that exited without being told to; each is a finding."""
        found = []
        for replica, rc in self.sk.unexpected_exits():
            found.append(f"{replica} exited {rc} unexpectedly: {failure_of(self.sk.log_text(replica))}")
            self.sk.restart(replica)
            self.wait_running(replica, timeout_s=180)
        return found

    def all_alive(self, since: float, timeout_s: float = 30.0) -> list[str]:
        """Each role is running and has sent a heartbeat after ``since`` (monotonic)."""
        hung = []
        for r in self.replicas:
            role = self.sk.roles.get(r)
            if role is None or not role.alive():
                hung.append(f"{r} is not running")
            elif self.obs.wait_heartbeat(r, after=since, timeout_s=timeout_s) is None:
                hung.append(f"{r} is running but sent no heartbeat for {timeout_s}s")
        return hung

    def custody(self, final: bool):
        scored = self.obs.read_scored()
        exclude = {c.sample_id for c in scored.values() if is_injected(c.task_id)}
        return check_custody(self.out, scored, final=final, exclude=exclude, retention_purged=self.retention_purged)

    # --- the end -------------------------------------------------------------------
    def finish(self, timeout_s: float = 240.0) -> dict:
        """Stop feeding, drain every hop, train the leftovers, then the final checks."""
        sk, out = self.sk, {}
        self.stop_sampling()
        for r in self.replicas:
            sk.roles[r].expect_exit = True
        sk.signal("learn-0", signal.SIGTERM)
        out["learner_stop_rc"] = sk.wait_exit("learn-0", 60)
        if out["learner_stop_rc"] != 0:
            self.violations.append(f"learner stopped by SIGTERM exited {out['learner_stop_rc']}")
        deadline = time.monotonic() + timeout_s / 2
        while time.monotonic() < deadline:
            pend = [self.obs.consumer_info(k, d) for k, d in (("TASKS", "rollout"), ("ROLLOUTS", "verify"))]
            if all(c is not None and c.num_pending == 0 and c.num_ack_pending == 0 for c in pend):
                break
            time.sleep(0.3)
        else:
            self.violations.append("TASKS/ROLLOUTS did not drain within the deadline after the learner stopped")
        for r in [*self.rollouts, *self.verifiers]:
            sk.signal(r, signal.SIGTERM)
        for r in [*self.rollouts, *self.verifiers]:
            rc = sk.wait_exit(r, 60)
            out[f"{r}_stop_rc"] = rc
            if rc != 0:
                self.violations.append(f"{r} stopped by SIGTERM exited {rc}")
                sk.reap(r)
        tasks_before = self.obs.stream_state("TASKS")
        # The leftovers: complete groups on SCORED that no committed entry settles.
        chk = self.custody(final=False)
        left_groups = self._unsettled_complete_groups()
        out["drain_groups"] = left_groups
        cfg = self.config("learn-drain", learn={"steps": chk.step + left_groups})
        self.start_learner(config=cfg, wait=False)
        rc = sk.wait_exit("learn-0", timeout_s)
        out["drain_learner_rc"] = rc
        if rc != 0:
            self.violations.append(f"the drain learner exited {rc}: {sk.log_text('learn-0')[-800:]}")
            sk.reap("learn-0")
        tasks_after = self.obs.stream_state("TASKS")
        out["tasks_issued_by_drain_learner"] = (
            (tasks_after.state.messages if tasks_after else 0) - (tasks_before.state.messages if tasks_before else 0))
        if tasks_after and tasks_after.state.messages:
            self.obs.purge("TASKS")  # nobody consumes them on purpose: the run is over
        final = self.custody(final=True)
        streams, sv = check_streams(self.obs, dead_expected=self.dead_expected, dead_sizes=self.dead_sizes)
        out["streams"] = streams
        out["custody"] = final
        self.violations += final.violations + sv
        return out

    def _unsettled_complete_groups(self) -> int:
        """The steps the drain learner can still make: complete groups on SCORED none of whose members
        the ledger settled."""
        committed = read_committed(self.out)
        settled = {sid for e in committed.entries for sid in (*e.trained, *e.dropped)}
        groups: dict[str, set[str]] = defaultdict(set)
        size = {}
        for c in self.obs.read_scored().values():
            if c.purpose == "train" and not is_injected(c.task_id) and c.sample_id not in self.retention_purged:
                groups[c.group_id].add(c.sample_id)
                size[c.group_id] = c.group_size
        # A group with any member settled cannot make a step: trained as a whole, or already dropped as
        # partial (its last members came after group_timeout_s, and the learner drops them when they do).
        return sum(1 for g, ids in groups.items() if len(ids) >= size[g] and ids.isdisjoint(settled))

    def close(self) -> None:
        self.sk.stop_all()
        if self.obs is not None:
            self.obs.close()
