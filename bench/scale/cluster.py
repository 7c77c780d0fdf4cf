"""Three nats-server nodes on this machine, clustered as ``ops/nats/cluster/n1-3.conf`` ship them.

Each node's config is the shipped one with only what one machine needs changed: its own client,
route and monitoring ports (free ones), its own store directory, a store size this disk can hold, and
routes that name the other two nodes' ports. Everything else (``max_payload``, ``max_pending``,
``write_deadline``, pings, ``max_memory_store``) is as shipped, so the bench measures the deployed
settings. The servers are started and stopped by PID (``bench.chaos.skeleton.Server``).

``Monitor`` reads each node's monitoring endpoints: ``/varz`` (the node's CPU share, memory, bytes in
and out, routes included) and ``/connz`` (each client connection's bytes, named
``rlvr-<run>-<replica>`` by the roles).

Not here: the run's streams (the learner creates them), the roles, the measurements.
"""

from __future__ import annotations

import json
import re
import socket
import urllib.request
from pathlib import Path

from bench.chaos.skeleton import REPO, Server

NODES = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_conf(i: int, store: Path, route_ports: list[int], out: Path, max_file_store_mb: int) -> Path:
    """ops/nats/cluster/n<i>.conf on loopback: listen and http come from the command line (Server's
    flags), the route ports are ours, the store is ``store`` and ``max_file_store_mb`` large."""
    text = (REPO / "ops" / "nats" / "cluster" / f"n{i}.conf").read_text()
    text = re.sub(r"(?m)^listen: .*$", "", text, count=1)  # the client listener: Server's -a/-p
    text = re.sub(r"(?m)^http: .*$", "", text)  # the monitor: Server's -m
    text = text.replace("listen: 0.0.0.0:6222", f"listen: 127.0.0.1:{route_ports[i - 1]}")
    text = re.sub(r"store_dir: \S+", f"store_dir: {store}", text)
    text = re.sub(r"max_file_store: \S+", f"max_file_store: {max_file_store_mb}MB", text)
    for j in range(1, NODES + 1):
        text = text.replace(f"nats://nats-{j}:6222", f"nats://127.0.0.1:{route_ports[j - 1]}")
    out.write_text(text)
    return out


class Cluster:
    """The three nodes; ``urls`` is the comma-separated list every role is given."""

    def __init__(self, root: Path, max_file_store_mb: int) -> None:
        root.mkdir(parents=True, exist_ok=True)
        routes = [free_port() for _ in range(NODES)]
        self.servers = []
        for i in range(1, NODES + 1):
            store = root / f"n{i}-store"
            conf = node_conf(i, store, routes, root / f"n{i}.conf", max_file_store_mb)
            self.servers.append(Server(store, conf=conf, name=f"rlvr-nats-{i}", monitor=True))

    def start(self) -> Cluster:
        for s in self.servers:
            s.start(timeout_s=90)
        return self

    def stop(self) -> None:
        for s in self.servers:
            s.kill()

    @property
    def urls(self) -> str:
        return ",".join(s.url for s in self.servers)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.servers]

    def pids(self) -> dict[str, int]:
        return {s.name: s.proc.pid for s in self.servers if s.proc is not None}

    def stores(self) -> dict[str, Path]:
        return {s.name: s.store for s in self.servers}


def monitor_get(server: Server, path: str, timeout_s: float = 5.0) -> dict:
    with urllib.request.urlopen(f"http://{server.addr}:{server.monitor_port}{path}", timeout=timeout_s) as r:
        return json.loads(r.read())


class Monitor:
    """Per node: varz's cpu (percent of one core), bytes in/out; per client connection: its bytes."""

    def __init__(self, cluster: Cluster, run: str) -> None:
        self.cluster, self.prefix = cluster, f"rlvr-{run}-"

    def varz(self) -> dict[str, dict]:
        out = {}
        for s in self.cluster.servers:
            v = monitor_get(s, "/varz")
            out[s.name] = {"in_bytes": v["in_bytes"], "out_bytes": v["out_bytes"], "in_msgs": v["in_msgs"],
                           "out_msgs": v["out_msgs"], "mem": v["mem"], "slow_consumers": v.get("slow_consumers", 0)}
        return out

    def connections(self) -> dict[str, dict]:
        """replica -> {in_bytes, out_bytes, node, pending_bytes}: bytes the server received from the client
        (what it published) and sent to it (what it was delivered), summed over its connections."""
        out: dict[str, dict] = {}
        for s in self.cluster.servers:
            for c in monitor_get(s, "/connz?limit=4096").get("connections", []):
                name = c.get("name", "")
                if not name.startswith(self.prefix):
                    continue
                row = out.setdefault(name.removeprefix(self.prefix),
                                     {"in_bytes": 0, "out_bytes": 0, "pending_bytes": 0, "node": s.name})
                row["in_bytes"] += c.get("in_bytes", 0)
                row["out_bytes"] += c.get("out_bytes", 0)
                row["pending_bytes"] += c.get("pending_bytes", 0)
        return out
