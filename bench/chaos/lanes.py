"""Scenarios run side by side: each lane a ``python -m bench.chaos`` process of its own.

The scenarios share nothing (each has its own nats-server on a free port, its own
run id, work folder and seed: ``seed + offset`` by name, so a lane never changes
what a scenario draws), so they can run at once. A lane is a process, not a thread,
so that SIGTERM to the runner reaches each lane, which unwinds as a serial run
does (every role, server, mount and namespace it made is cleaned up).

Scenarios go to the lane with the least estimated wall time so far (``COST_S``,
seconds measured on the 2-core machine, quick and full), in ``SCENARIOS`` order.
The report is built from the ``scenario-*.json`` every lane writes as each
scenario ends, so a lane that dies still leaves what it finished.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# (quick, full) wall seconds of each scenario alone, measured (bench/results/chaos.md); a guess where marked.
COST_S = {
    "main": (210, 1000), "main2": (210, 1000), "main3": (210, 1000), "cluster": (60, 150), "engine": (60, 300), "agents": (60, 190),
    "autoscale": (100, 480), "envs": (100, 480), "stages": (120, 600),  # the new ones: their targets
}


def plan_lanes(wanted: list[str], lanes: int, quick: bool) -> list[list[str]]:
    """Greedy: each scenario, in order, to the lane whose estimated total is smallest."""
    out: list[list[str]] = [[] for _ in range(max(1, lanes))]
    totals = [0] * len(out)
    for name in wanted:
        i = totals.index(min(totals))
        out[i].append(name)
        totals[i] += COST_S.get(name, (120, 600))[0 if quick else 1]
    return [lane for lane in out if lane]


def run_lanes(lanes: list[list[str]], argv_rest: list[str], work: Path) -> list[dict]:
    """Start one process per lane, wait for all, return every scenario result they saved."""
    procs: list[subprocess.Popen] = []
    try:
        for i, names in enumerate(lanes):
            cmd = [sys.executable, "-m", "bench.chaos", *argv_rest, "--lanes", "1",
                   "--scenarios", ",".join(names), "--work-dir", str(work / f"lane-{i}")]
            print(f"[chaos] lane {i}: {','.join(names)}", flush=True)
            procs.append(subprocess.Popen(cmd))
        for p in procs:
            p.wait()
    except KeyboardInterrupt:  # SIGTERM or Ctrl-C of the runner: each lane unwinds its own scenario
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            p.wait()
        raise
    results: list[dict] = []
    for i, (names, p) in enumerate(zip(lanes, procs, strict=True)):
        saved = {}
        for f in sorted((work / f"lane-{i}").glob("scenario-*.json")):
            r = json.loads(f.read_text())
            saved[r.get("name", r.get("scenario"))] = r
        for name in names:
            results.append(saved.get(name) or {
                "scenario": name, "faults": [],
                "violations": [f"scenario {name} left no result (lane {i} exited {p.returncode})"]})
    return results
