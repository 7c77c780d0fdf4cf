"""The run the scale bench loads: its one config, and the role processes started on it.

Every role is the real one, started as a user would (``python -m rlvr.cli --role ...`` through
``bench.chaos.skeleton.Skeleton``: by PID, ``OMP_NUM_THREADS=1``, all three node URLs):

- **learn**: the dry learner (no ``[learn.engine]``): its feeder issues R1-shaped tasks (a group of
  16, up to 32,768 tokens), and it takes every Scored through custody, group assembly and
  checkpoint-held acks, training nothing. It owns the topology: R3 file streams (``bus.replicas``).
  The sample dump (``learn.samples``, a person's reading copy of every trained token) is off: it
  is a disk write of the learner's, not the bus's.
- **verify**: the built-in ``exact`` verifier (inline, no worker round trip), so the bus is measured
  and not the scoring.
- **rollout**: the trivial engine with ``[rollout.engine.lengths]``: completions of a reasoning
  model's lengths, each replica paced at ``tokens_per_s`` like a decoder of that speed.

Not here: the servers (cluster.py), what is measured (meter.py), the ladder (run.py).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import msgspec

from bench.chaos.skeleton import Skeleton

RUN = "scale"
# DeepSeek-R1 (arXiv:2501.12948, Nature 645:633, supplementary "training details"): 16 outputs per
# question, at most 32,768 tokens each, 32 questions (512 outputs) per policy update.
R1_GROUP = 16
R1_MAX_TOKENS = 32_768
R1_GROUPS_PER_UPDATE = 32


class Shape(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What each level of the bench runs: the samples and the pace of one rollout replica."""

    group_size: int = R1_GROUP
    max_tokens: int = R1_MAX_TOKENS
    median_tokens: int = 2048
    sigma: float = 1.18
    tokens_per_s: float = 40_000.0  # per rollout replica
    groups_per_step: int = R1_GROUPS_PER_UPDATE
    rollout_inflight: int = 2  # tasks a replica holds; its engine paces them one after another
    verifiers: int = 2
    verify_concurrency: int = 64
    scored_max_mb: int = 1024


def run_config(shape: Shape, max_rollouts: int) -> dict:
    """One config every role reads its own section of."""
    return {
        "run": RUN,
        "bus": {"replicas": 3, "storage": "file", "scored_max_bytes": shape.scored_max_mb << 20,
                "dead_max_bytes": 64 << 20, "heartbeat_every_s": 1.0},
        "observability": {"log_format": "json"},
        "learn": {
            "group_size": shape.group_size, "groups_per_step": shape.groups_per_step, "steps": 1_000_000,
            "max_staleness": 1000, "dynamic_sampling": False, "checkpoint_every": 1,
            # Tasks out: a step's groups waiting for it, and four times what every replica of the last level
            # holds, so that no replica waits for a task (a smaller window starves the rollouts, not the bus).
            "max_inflight_tasks": shape.groups_per_step + 4 * max_rollouts * shape.rollout_inflight,
            "sampling": {"max_tokens": shape.max_tokens},
            "samples": {"dump": False},
            "dataset": {"kind": "arithmetic", "verifier": {"name": "exact",
                                                          "params": {"gold": "{gold}", "after": "####"}}},
        },
        "rollout": {
            "max_inflight_tasks": shape.rollout_inflight,
            "engine": {"kind": "trivial", "accuracy": 0.5,
                       "lengths": {"median_tokens": shape.median_tokens, "sigma": shape.sigma,
                                   "tokens_per_s": shape.tokens_per_s}},
        },
        "verify": {"pool_size": 1, "warm_verifiers": [], "concurrency": shape.verify_concurrency},
    }


class Fleet:
    """The role processes of the run; ``pids()`` by role, for the CPU readings."""

    def __init__(self, root: Path, urls: str, shape: Shape, max_rollouts: int) -> None:
        self.sk = Skeleton(root, RUN, urls)
        cfg = run_config(shape, max_rollouts)
        self.max_inflight_tasks: int = cfg["learn"]["max_inflight_tasks"]
        self.config = self.sk.write_config("run", cfg)
        self.rollouts: list[str] = []
        self.verifiers: list[str] = []

    def start_learner(self) -> None:
        self.sk.start("learn", "learn-0", self.config)

    def start_verifiers(self, n: int) -> list[str]:
        new = [f"verify-{i}" for i in range(len(self.verifiers), n)]
        for v in new:
            self.sk.start("verify", v, self.config)
        self.verifiers += new
        return new

    def grow_rollouts(self, n: int) -> list[str]:
        """Start rollout replicas until there are ``n``; the names of the new ones."""
        new = [f"rollout-{i}" for i in range(len(self.rollouts), n)]
        for r in new:
            self.sk.start("rollout", r, self.config)
        self.rollouts += new
        return new

    def pids(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {"learn": [], "verify": [], "rollout": []}
        for r in self.sk.roles.values():
            if r.proc is not None:
                out[r.role].append(r.proc.pid)
        return out

    def exited(self) -> list[tuple[str, int]]:
        return self.sk.unexpected_exits()

    def log_tail(self, replica: str, chars: int = 2000) -> str:
        return self.sk.log_text(replica)[-chars:]

    def first_dead_letter(self) -> str:
        """The first log line of any role that says it dead-lettered a message."""
        for name in self.sk.roles:
            for line in self.sk.log_text(name).splitlines():
                if '"dead_letter"' in line:
                    return f"{name}: {line[:600]}"
        return ""

    def stop(self) -> None:
        """SIGTERM every role (each drains), then SIGKILL what is left, by process group."""
        for name in self.sk.roles:
            self.sk.signal(name, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for name in list(self.sk.roles):
            self.sk.wait_exit(name, max(0.1, deadline - time.monotonic()))
        self.sk.stop_all()
