"""Whether the run's own nats-server can reserve what the run's streams ask, checked by ``up`` before
anything starts.

JetStream reserves a stream's ``max_bytes`` of its file store when the stream is created
(``actors/topology.py``, ``RESERVING_KEYS``: SCORED's ``bus.scored_max_bytes``, 2 GiB, and DEAD's
``bus.dead_max_bytes``, 256 MiB, per run). The server ``up`` starts sets no ``max_file_store``, so
its store is 3/4 of the disk free where it lives when it starts (nats-server's default; measured
here: 34.96 GB free gave "Max Storage: 24.42 GB", 26.2 GB). Past that, the learner's first call
to create SCORED failed with JetStream's bare error 10047, minutes into a run; with ``[[stages]]``
every part (an RL stage, a measurement, rejection sampling) is its own run on the same server, and
a CI machine with 14 GB free failed the third.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rlvr.actors.topology import reserved_bytes

JETSTREAM_SHARE = 0.75  # of the free disk: nats-server's file store when max_file_store is not set


def _free_bytes(path: Path) -> int:
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def bus_disk_shortfall(cfg, store_dir: Path, free_bytes: int | None = None) -> str | None:
    """Why the server ``up`` starts with its store in ``store_dir`` could not reserve the run's
    streams; None when it can (or when the bus keeps its streams in memory). ``free_bytes``: the
    disk free there (default: measured)."""
    if cfg.bus.storage != "file":
        return None
    runs = 1
    if cfg.stages:
        from rlvr.cli.stages.config import bus_runs

        runs = bus_runs(cfg.learn, cfg.stages)
    per_run = reserved_bytes(cfg.bus)
    needed = runs * per_run
    free = _free_bytes(store_dir) if free_bytes is None else free_bytes
    if needed <= JETSTREAM_SHARE * free:
        return None
    each = (f"{_gib(per_run)} (bus.scored_max_bytes {_gib(cfg.bus.scored_max_bytes)} + bus.dead_max_bytes "
            f"{_gib(cfg.bus.dead_max_bytes)})")
    reserve = (f"its {runs} runs with streams of their own ([[stages]]) reserve {each} each, {_gib(needed)} in all,"
               if runs > 1 else f"its streams reserve {each}")
    return (f"the bus cannot hold this run: {reserve} of nats-server's file store, and the server "
            f"`up` starts gets 3/4 of the {_gib(free)} free at {store_dir}: {_gib(JETSTREAM_SHARE * free)}. "
            f"Free disk there, put the run elsewhere (--run-dir, up.runs_dir), or lower bus.scored_max_bytes "
            f"(the oldest scored samples go first past it; a learner further behind than that stops and "
            f"says so)")


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB"


__all__ = ["JETSTREAM_SHARE", "bus_disk_shortfall"]
