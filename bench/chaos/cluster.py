"""A 3-node NATS cluster with R3 streams, in network namespaces this module creates.

Layout (all namespaces and links are ours, made here and deleted on the way out;
the host's own interfaces are never touched)::

    rlvrchaos-n1  10.231.0.1 ─ veth ─┐
    rlvrchaos-n2  10.231.0.2 ─ veth ─┤ br0 10.231.0.254 in rlvrchaos-hub
    rlvrchaos-n3  10.231.0.3 ─ veth ─┘ (the runner, the observer and every role)

Each node runs nats-server with a config derived from ops/nats/cluster/nN.conf
(the shipped one: only addresses, store, sizes and routes are replaced). A
*partition* takes one node's link down in the hub (``ip link set ... down``):
that node keeps running but reaches neither its peers nor any client, and
comes back when the link is set up again. A *leader kill* SIGKILLs the node
that leads the SCORED stream's Raft group and restarts it on the same store.

The scenario runs in the hub namespace: ``run_cluster_scenario`` re-runs this
module there (``ip netns exec``) and reads back its JSON. Needs root and
iproute2; without them it returns a scenario that says why it was skipped.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.chaos import faults as F
from bench.chaos.scenario import Scenario
from bench.chaos.skeleton import REPO, Server

HUB = "rlvrchaos-hub"
NODES = ("rlvrchaos-n1", "rlvrchaos-n2", "rlvrchaos-n3")
NET = "10.231.0"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def make_network() -> None:
    delete_network()
    _ip("netns", "add", HUB)
    _ip("-n", HUB, "link", "set", "lo", "up")
    _ip("-n", HUB, "link", "add", "br0", "type", "bridge")
    _ip("-n", HUB, "addr", "add", f"{NET}.254/24", "dev", "br0")
    _ip("-n", HUB, "link", "set", "br0", "up")
    for i, ns in enumerate(NODES, 1):
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", HUB, "link", "add", f"v{i}h", "type", "veth", "peer", "name", f"v{i}n", "netns", ns)
        _ip("-n", HUB, "link", "set", f"v{i}h", "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{NET}.{i}/24", "dev", f"v{i}n")
        _ip("-n", ns, "link", "set", f"v{i}n", "up")


def delete_network() -> None:
    for ns in (HUB, *NODES):
        _ip("netns", "del", ns, check=False)


def node_conf(i: int, store: Path, out: Path) -> Path:
    """ops/nats/cluster/n<i>.conf with this namespace's addresses, a small store and our routes."""
    text = (REPO / "ops" / "nats" / "cluster" / f"n{i}.conf").read_text()
    text = text.replace("listen: 0.0.0.0:4222", f"listen: {NET}.{i}:4222")
    text = re.sub(r"(?m)^http: .*$", "", text)
    text = text.replace("listen: 0.0.0.0:6222", f"listen: {NET}.{i}:6222")
    text = re.sub(r"store_dir: \S+", f"store_dir: {store}", text)
    text = re.sub(r"max_file_store: \S+", "max_file_store: 256MB", text)
    text = re.sub(r"max_memory_store: \S+", "max_memory_store: 64MB", text)
    for j in (1, 2, 3):
        text = text.replace(f"nats://nats-{j}:6222", f"nats://{NET}.{j}:6222")
    out.write_text(text)
    return out


def partition(sc: Scenario, rng, node: int | None = None) -> dict:
    """Take one node's link down for a seeded while (the leader of SCORED half the time)."""
    leader = sc.obs.stream_leader("SCORED")
    names = [s.name for s in sc.servers]
    if node is None:
        node = names.index(leader) if leader in names and rng.random() < 0.5 else rng.randrange(3)
    hold = round(rng.uniform(4.0, 12.0), 2)
    _ip("-n", HUB, "link", "set", f"v{node + 1}h", "down")
    time.sleep(hold)
    _ip("-n", HUB, "link", "set", f"v{node + 1}h", "up")
    return {"kind": "cluster:partition", "node": names[node], "was_scored_leader": names[node] == leader,
            "held_s": hold, "leader_after": sc.obs.stream_leader("SCORED")}


def kill_leader(sc: Scenario, rng, stream: str = "SCORED") -> dict:
    leader = sc.obs.stream_leader(stream)
    names = [s.name for s in sc.servers]
    index = names.index(leader) if leader in names else rng.randrange(3)
    rec = F.kill_server(sc, rng, index)
    rec.update(kind="cluster:leader_killed", stream=stream, leader=leader, leader_after=sc.obs.stream_leader(stream))
    return rec


def cluster_plan(rng: random.Random, quick: bool) -> list[tuple[str, object]]:
    plan = [("cluster:leader_killed", kill_leader)] * (2 if quick else 4)
    plan += [("cluster:leader_killed:TASKS", lambda sc, g: kill_leader(sc, g, "TASKS"))] * (0 if quick else 2)
    plan += [("cluster:partition", partition)] * (2 if quick else 4)
    plan += [("sigkill:learn", F.kill_learner_seeded)] * 2
    plan += [("sigkill:verify-0", lambda sc, g: F.kill_role(sc, g, "verify-0"))]
    rng.shuffle(plan)
    return plan


def inner(root: Path, run: str, seed: int, quick: bool) -> dict:
    """Runs inside the hub namespace: the servers in theirs, everything else here."""
    from bench.chaos.run import run_fault

    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    servers = []
    for i, ns in enumerate(NODES, 1):
        store = root / f"n{i}-store"
        conf = node_conf(i, store, root / f"n{i}.conf")
        servers.append(Server(store, addr=f"{NET}.{i}", port=4222, conf=conf, netns=ns, name=f"rlvr-nats-{i}"))
    for s in servers:
        s.start(timeout_s=90)
    sc = Scenario(root, run, seed=seed, servers=servers, bus={"replicas": 3, "scored_max_bytes": 32 << 20})
    records: list[dict] = []
    result: dict = {"scenario": "cluster", "run": run, "seed": seed, "nodes": [s.url for s in servers]}
    try:
        sc.start(learner_config=sc.config("learn-first", learn={"checkpoint_every": 1000}))
        sc.start_sampling()
        records.append(run_fault(sc, "sigkill:learn:before_first_checkpoint", F.kill_learner_before_first_checkpoint,
                                 rng))
        for label, fn in cluster_plan(rng, quick):
            records.append(run_fault(sc, label, fn, rng))
        result["finish"] = sc.finish()
    except Exception as e:  # the runner's own failure: kept with the faults done so far
        sc.violations.append(f"the runner failed: {type(e).__name__}: {e}")
    finally:
        result["faults"] = records
        result["violations"] = sc.violations
        sc.close()
        for s in servers:
            s.kill()
    return result


def run_cluster_scenario(root: Path, run: str, seed: int, quick: bool) -> dict:
    """Build the namespaces, run ``inner`` in the hub, read its result, delete the namespaces."""
    skipped = {"scenario": "cluster", "run": run, "faults": [], "violations": []}
    if not shutil.which("ip"):
        return {**skipped, "skipped": "iproute2 (ip) is not installed"}
    try:
        make_network()
    except subprocess.CalledProcessError as e:
        delete_network()
        return {**skipped, "skipped": f"cannot create network namespaces: {e.stderr.strip()}"}
    out = root / "cluster-result.json"
    root.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", HUB, sys.executable, "-m", "bench.chaos.cluster", str(root), run, str(seed),
             "1" if quick else "0", str(out)],
            cwd=REPO, start_new_session=True,
        )
        try:
            proc.wait(3600)
        finally:
            if proc.poll() is None:  # interrupted: let it unwind (stop its roles and servers) first
                proc.terminate()
                try:
                    proc.wait(90)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if not out.exists():
            return {**skipped, "violations": [f"the cluster scenario ended ({proc.returncode}) without a result"]}
        return json.loads(out.read_text())
    finally:
        delete_network()


if __name__ == "__main__":
    from bench.chaos.run import _jsonable

    root_, run_, seed_, quick_, out_ = sys.argv[1:6]
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    res = inner(Path(root_), run_, int(seed_), quick_ == "1")
    Path(out_).write_text(json.dumps(_jsonable(res)))
