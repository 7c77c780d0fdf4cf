"""The agents scenario: agent episodes through the rollout's endpoint, under fault injection.

A run of its own (``chaos5``, its own nats-server), because agent episodes need tasks without an
environment (a task with ``env`` is an environment's episode on any replica) while the main
scenario's tasks are all episodes of ``bench.chaos.episodes:Quiz``. Its learner's dataset is the
plain arithmetic one, scored ``exact``, and two rollout replicas take its tasks from the same
queue:

- ``rollout-0``: the trivial engine, one completion per sample (fast: it carries the run's volume,
  so the floor moves and the custody checks see thousands of samples);
- ``rollout-1``: the same engine with ``[rollout.agent]`` set: every task it takes is played as
  ``group_size`` episodes of bench/chaos/agent.py, a command agent on the real ``openai`` client
  (two requests, the second streamed). ``max_inflight_tasks = 1``: an agent episode costs a
  Python start and ``import openai`` (about 1 s of CPU), so it plays a few groups a minute
  beside rollout-0's hundreds. Its engine waits while ``engine-go`` is missing (``hold_file``):
  the one lever ``agent:sigkill_mid_request`` needs to catch a request in generation.

So agent and single-turn groups share one learner and one ledger, and the invariants (0 lost,
0 trained twice, every drop counted) cover both. The faults (agent_faults.py) each break one
agent episode, checked as it ends; at the end every faulted episode's sample must be dropped
with a counted reason, never trained, and no agent process may be left anywhere.
"""

from __future__ import annotations

import random
import sys
import time
import traceback
from pathlib import Path

from bench.chaos import agent_faults as A
from bench.chaos import faults as F
from bench.chaos.scenario import Scenario

DATASET = {"kind": "arithmetic", "verifier": {"name": "exact", "params": {"gold": "{gold}"}}}
MODES = ("sigkill_mid_request", "sigkill_mid_stream", "disconnect_mid_stream", "many_connections", "wrong_key")


class AgentScenario(Scenario):
    def __init__(self, root: Path, run: str, **kw) -> None:
        super().__init__(root, run, learn={"dataset": DATASET}, **kw)
        self.rollouts = ["rollout-0", A.REPLICA]
        self.agent_faulted: dict[str, str] = {}  # episode (= sample id) -> the fault it played
        self.agent_done = 0  # episodes ended done by the agent replica's earlier starts (its heartbeats)

    def rollout_config(self, replica: str) -> Path:
        if replica != A.REPLICA:
            return self.config("roles")
        return self.config("roles-agent", rollout={
            "engine": {"kind": "trivial", "accuracy": 0.5, "hold_file": str(self.root / "engine-go")},
            "max_inflight_tasks": 1,
            "agent": {"command": [sys.executable, str(A.AGENT)], "timeout_s": 30.0, "max_requests": 16,
                      "max_concurrent": 4, "env": {"CHAOS_DIR": str(self.root)}},
        })


def agent_plan(rng: random.Random, quick: bool) -> list[tuple[str, object]]:
    """The quick run (CI, under 5 minutes with the main scenario): the agent SIGKILLed mid-request and
    the agent replica SIGKILLed under running agents. The full run: every agent kind three times, the
    replica killed twice, a nats-server and a learner kill. In a seeded order."""
    def fault(m: str) -> tuple[str, object]:
        return (f"agent:{m}", lambda sc, g, m=m: A.agent_fault(sc, g, m))

    kill = ("agent:sigkill_rollout", A.kill_rollout_with_agents)
    if quick:
        plan: list[tuple[str, object]] = [fault("sigkill_mid_request"), kill]
    else:
        plan = [fault(m) for m in MODES] * 3 + [kill] * 2
        plan += [("sigkill:nats-server", F.kill_server), ("sigkill:learn", F.kill_learner_seeded)]
    rng.shuffle(plan)
    return plan


def run_agent_scenario(root: Path, run: str, seed: int, quick: bool, only: list[str] = ()) -> dict:
    from bench.chaos.run import play, scenario_server

    rng = random.Random(seed)
    server = scenario_server(root, run)
    sc = AgentScenario(root, run, seed=seed, servers=[server])
    (root / "engine-go").touch()
    records: list[dict] = []
    result: dict = {"scenario": "agents", "run": run, "seed": seed}
    try:
        sc.start()
        sc.start_sampling()
        records += play(sc, agent_plan(rng, quick), rng, only)
        ends = _episode_ends(sc)  # before finish: its heartbeats stop with the replica
        result["finish"] = sc.finish()
        fates, found = A.check_faulted(sc)
        result["faulted_episodes"] = fates
        sc.violations += found
        result["agent_episode_ends"] = ends
        if not ends.get("done"):
            sc.violations.append(f"no agent episode ended done on {A.REPLICA}: {ends}")
    except Exception as e:  # the runner's own failure: kept with the faults done so far
        traceback.print_exc()
        sc.violations.append(f"the runner failed: {type(e).__name__}: {e}")
    finally:
        result["faults"] = records
        sc.close()
        server.kill()
        time.sleep(0.5)  # the supervisors of a replica just SIGKILLed are told by the kernel (die_with_parent)
        left = A._wait_gone([p.pid for p in A.agent_processes(root, supervisors=True)], 10)
        if left:
            sc.violations.append(f"{len(left)} agent processes left after the scenario: {left}")
            A._kill(left)
        result["violations"] = sc.violations
    return result


def _episode_ends(sc: AgentScenario) -> dict[str, int]:
    """Agent episodes by end reason: the failures from the replica's log (``agent_episode_ended``, every
    start of it), ``done`` from its heartbeats' ``agent_end_done`` (the last one of every start)."""
    import json

    ends: dict[str, int] = {}
    for line in sc.sk.log_text(A.REPLICA).splitlines():
        if '"agent_episode_ended"' in line:
            try:
                r = json.loads(line).get("reason", "?")
            except ValueError:
                continue
            ends[r] = ends.get(r, 0) + 1
    hb = sc.obs.last_heartbeat(A.REPLICA)
    ends["done"] = sc.agent_done + (int(hb[1].counters.get("agent_end_done", 0)) if hb else 0)
    return ends
