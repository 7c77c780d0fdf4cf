"""``python -m bench.chaos --quick``: at least 25 seeded faults (SIGKILL and SIGSTOP of every
role, the learner killed before its first checkpoint and between learner.json and
``latest``, nats-server killed and restarted, a second learner, consumers deleted, the
JetStream store full, the checkpoint disk full, a retention gap) and poison on every
consumed subject, against a real skeleton, in under 10 minutes; every published sample is
trained or dropped exactly once and no invariant is broken. Its agents scenario
(bench/chaos/agent_scenario.py) plays agent episodes on the real ``openai`` client through a
replica's endpoint, the agent SIGKILLed mid-request and its replica SIGKILLed under running agents
(every agent kind is in the full run): the failed episode is dropped with a counted reason, never
trained, and no agent process is left. One fault of each other surface too, each scenario beside the
main one (``--lanes 2``): the autoscaler SIGKILLed while it scales up, an OpenEnv server killed
mid-episode, the learner SIGKILLed in a stage's rejection sampling, and the disk under nats-server full.

The runner is the test: it starts real nats-server and role processes, checks the
invariants after every fault and at the end, and writes the report read here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_quick_chaos_run_holds_every_invariant(tmp_path):
    report = tmp_path / "chaos.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.chaos", "--quick", "--seed", "0", "--report", str(report),
         "--work-dir", str(tmp_path / "work")],
        cwd=REPO, capture_output=True, text=True, timeout=900, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(report.read_text())
    assert r["faults_injected"] >= 25, r["faults_by_kind"]
    assert r["samples_lost"] == 0 and r["samples_trained_twice"] == 0, r["violations"]
    assert r["samples_in_flight_at_end"] == 0
    assert r["samples_trained"] > 0 and r["samples_published"] > 0
    assert r["poison_messages"] >= 20 and r["poison_dead_lettered"] > 0
    assert r["violations"] == [], "\n".join(r["violations"])
    assert {"agent:sigkill_mid_request", "agent:sigkill_rollout"} <= set(r["faults_by_kind"]), r["faults_by_kind"]
    surfaces = ("autoscale:", "openenv:", "verifiers:", "stages:")
    if os.geteuid() == 0:  # the disks are tmpfs the runner mounts (root only; the report says when skipped)
        surfaces += ("nats_store_disk_full", "checkpoint_disk_full")
    missing = [p for p in surfaces if not any(k.startswith(p) for k in r["faults_by_kind"])]
    assert not missing, (missing, r["faults_by_kind"])
    agents = next(s for s in r["scenarios"] if s["scenario"] == "agents")
    assert agents["agent_episode_ends"]["done"] > 0, agents["agent_episode_ends"]
    fates = agents["faulted_episodes"]
    assert len(fates) == 1 and all(f not in ("trained", "unsettled") for f in fates.values()), fates
    assert r["wall_s"] < 600, r["wall_s"]
    assert proc.returncode == 0
