"""Weights by collective under `up`: the learner role hosts the gloo rendezvous, the
rollout replica joins it, and every version after the join arrives by broadcast.

The whole path runs as users run it: `rlvr-actor up` with `weights_transport =
"nccl"` and `backend = "gloo"` (CPU), a tiny model on the hf engine. The first
version goes by the object-store fallback (the replica joins on the first
announcement, after it was published), later ones by the collective, and every
role exits 0 (the rendezvous and its groups are torn down before the learner's
process ends). tests/rollout/test_weights_collective.py checks bit-equality and
the failure paths.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import REPO, write_config

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_up_with_the_collective_transport_loads_later_versions_by_broadcast_and_exits_0(tmp_path):
    from rlvr.learner.example.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny", hidden=64, layers=1, heads=2)
    cfg = {
        "run": "coll",
        "rollout": {"engine": {"kind": "hf", "model": str(model), "max_prompt_tokens": 64}, "max_inflight_tasks": 8,
                    "collective": {"join": True}},
        "verify": {"pool_size": 1, "warm_verifiers": [], "concurrency": 8},
        "learn": {
            "group_size": 4, "groups_per_step": 2, "steps": 6, "checkpoint_every": 2, "dynamic_sampling": False,
            "max_staleness": 1, "weights_transport": "nccl",
            "collective": {"backend": "gloo", "address": f"127.0.0.1:{_free_port()}", "timeout_s": 30},
            "sampling": {"max_tokens": 6, "temperature": 1.0},
            "dataset": {"kind": "arithmetic", "holdout": 4},
            "eval": {"prompts": 0},
            "engine": {"model_path": str(model), "zero_stage": 0, "bf16": False, "gradient_checkpointing": False,
                       "micro_batch_tokens": 4096, "pad_token_id": 0, "schedule": {"type": "constant"}},
        },
        "up": {"verify_replicas": 1, "rollout_replicas": 1, "display": "plain"},
    }
    path = write_config(tmp_path / "cfg.json", cfg)
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "rlvr.cli", "up", "--config", str(path), "--run-dir", str(run_dir)],
                         capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=600,
                         cwd=REPO)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for role in ("learn-0", "rollout-0", "verify-0"):
        assert f"{role} exited with 0" in out.stdout, out.stdout[-3000:]
    events = [json.loads(line) for line in (run_dir / "logs" / "rollout-0.log").read_text().splitlines()
              if line.startswith("{")]
    loaded = [(e["version"], e.get("transport")) for e in events if e.get("event") == "weights_loaded"]
    by_broadcast = [v for v, transport in loaded if transport == "collective"]
    assert any(e.get("event") == "collective_joined" for e in events)
    assert len(by_broadcast) >= 3, loaded
    # What the replica missed before it joined came by the fallback, and said so.
    assert all(v in by_broadcast or t == "object_store" for v, t in loaded), loaded
    versions = [v for v, _ in loaded]
    assert versions == sorted(versions)  # never an older policy after a newer one
