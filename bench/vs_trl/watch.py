"""What a framework's processes cost while it runs: the tree's peak RSS and CPU, and the load average.

``Watch(pid)`` samples the process and all its descendants every ``every_s`` on a thread of its own:
the peak of the tree's summed RSS (several role processes are alive at once under ``rlvr-actor up``),
the CPU seconds each process used (the last reading of each pid, so processes that ended still count),
and the 1-minute load average at each sample.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import psutil


class TreeThread:
    """Calls ``sample()`` every ``every_s`` on a thread of its own while in a ``with`` block, for the
    process ``pid`` and its descendants (``self.root``); subclasses say what a sample reads."""

    name = "tree-sampler"

    def __init__(self, pid: int, every_s: float) -> None:
        self.root = psutil.Process(pid)
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.every_s):
                return

    def sample(self) -> None:
        raise NotImplementedError


class Watch(TreeThread):
    name = "vs-trl-watch"

    def __init__(self, pid: int, every_s: float = 0.5) -> None:
        super().__init__(pid, every_s)
        self.peak_rss = 0
        self.cpu: dict[int, float] = {}
        self.labels: dict[int, str] = {}
        self.loads: list[float] = []

    def sample(self) -> None:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        rss = 0
        for p in procs:
            try:
                with p.oneshot():
                    rss += p.memory_info().rss
                    t = p.cpu_times()
                    self.cpu[p.pid] = t.user + t.system
                    if p.pid not in self.labels:
                        self.labels[p.pid] = label(p.cmdline())
            except psutil.Error:
                continue
        self.peak_rss = max(self.peak_rss, rss)
        self.loads.append(os.getloadavg()[0])

    def cpu_by_label(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, cpu in self.cpu.items():
            name = self.labels.get(pid, "?")
            out[name] = round(out.get(name, 0.0) + cpu, 1)
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def summary(self) -> dict:
        return {
            "peak_rss_mib": round(self.peak_rss / 2**20, 1),
            "cpu_s": round(sum(self.cpu.values()), 1),
            "cpu_s_by_process": self.cpu_by_label(),
            "load1_mean": round(sum(self.loads) / len(self.loads), 2) if self.loads else None,
            "load1_max": round(max(self.loads), 2) if self.loads else None,
        }


def label(cmdline: list[str]) -> str:
    """What a process is, for the CPU split: its role (``--role learn``), a verifier's pool worker,
    nats-server, the preparation step, or the program's name."""
    if "--role" in cmdline[:-1]:
        return cmdline[cmdline.index("--role") + 1]
    joined = " ".join(cmdline)
    for key, name in (("pool_worker", "verify pool worker"), ("nats-server", "nats-server"), ("example.prepare", "prepare"),
                      ("run_trl", "trl"), (" up ", "up (launcher)")):
        if key in joined:
            return name
    return Path(cmdline[0]).name if cmdline else "?"
