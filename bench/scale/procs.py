"""CPU seconds and disk writes of process trees, from one pass over /proc per reading (Linux).

A role is its process and every descendant (a verifier's pool workers); a node is its nats-server.
One ``snapshot()`` reads every process's parent, CPU ticks and (for the PIDs asked) the bytes it
caused to be written to storage (``/proc/<pid>/io`` ``write_bytes``), so a second of readings costs
one scan however many trees are read from it.

Not here: which process is which role (run.py), the rates (meter.py).
"""

from __future__ import annotations

import os

_TICK = os.sysconf("SC_CLK_TCK")


class Snapshot:
    def __init__(self, io_pids: set[int]) -> None:
        self.parent: dict[int, int] = {}
        self.ticks: dict[int, int] = {}
        self.written: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            self.parent[pid] = int(fields[1])
            self.ticks[pid] = int(fields[11]) + int(fields[12])  # utime + stime
            if pid in io_pids:
                self.written[pid] = _write_bytes(pid)
        self.children: dict[int, list[int]] = {}
        for pid, ppid in self.parent.items():
            self.children.setdefault(ppid, []).append(pid)

    def tree(self, root: int) -> set[int]:
        out, frontier = {root}, [root]
        while frontier:
            for child in self.children.get(frontier.pop(), []):
                if child not in out:
                    out.add(child)
                    frontier.append(child)
        return out

    def cpu_s(self, roots: list[int]) -> float:
        """CPU seconds of the live processes of these trees (a process that exited takes its ticks with it:
        the roles here run for the whole bench, so only a replaced pool worker could)."""
        pids: set[int] = set()
        for root in roots:
            pids |= self.tree(root)
        return sum(self.ticks.get(p, 0) for p in pids) / _TICK


def _write_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def snapshot(io_pids: set[int] | None = None) -> Snapshot:
    return Snapshot(io_pids or set())
