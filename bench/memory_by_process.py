"""Where the memory of ``rlvr-actor up`` goes, process by process.

    OMP_NUM_THREADS=1 python bench/memory_by_process.py --set learn.steps=60 --out bench/results/memory_builtin.jsonl

Starts ``rlvr-actor up`` (the built-in example unless ``--config``), samples every process of its tree
every ``--every-s`` until it exits, and prints one row per process: its peak RSS, USS and PSS
(``psutil.Process.memory_full_info``), and what its resident pages are, grouped by mapping (a library's
package, the Python binary, anonymous memory: the heap, tensors, arenas) at the moment of its peak PSS.

Why several figures: RSS counts every page a process maps, so pages that several processes share (the
same ``libtorch_cpu.so`` mapped by the learner and the rollout, the interpreter's text) are counted
once per process; ``bench/vs_trl/watch.py``'s ``peak_rss_mib`` is the peak of that sum over the tree.
USS is what the process alone holds (what its exit frees); PSS splits each shared page between the
processes that map it. Both depend on what else runs on the machine: a file page that another user's
torch process also maps is shared, not private. So the line to compare across runs is the tree's
footprint at its peak summed RSS: every process's anonymous memory (heap, tensors, Python objects:
private by nature) plus each mapped file's pages counted once.

Deliberately not covered: GPU memory, and what the process's Python objects are (tracemalloc); the
mapping groups say which library or heap holds the pages, the docs say why.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vs_trl.watch import TreeThread  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MIB = 2**20


def label(cmdline: list[str]) -> str:
    """A process by what it is: a role's replica (``learn-0``), a verifier's pool worker, nats-server,
    the preparation step, the launcher, or the program's name."""
    if "--replica" in cmdline[:-1]:
        return cmdline[cmdline.index("--replica") + 1]
    joined = " ".join(cmdline)
    for key, name in (("pool_worker", "verify pool worker"), ("nats-server", "nats-server"),
                      ("example.prepare", "prepare"), (" up ", "up (launcher)")):
        if key in joined:
            return name
    return Path(cmdline[0]).name if cmdline else "?"


def mapping_group(path: str) -> str:
    """The owner of a mapping: the package under site-packages, the Python binary, a system library's
    name, or ``[anon]`` (heap, tensors, malloc arenas, thread stacks: private to the process)."""
    if not path or path.startswith("[") and path not in ("[vdso]", "[vvar]", "[vsyscall]"):
        return "[anon]"
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0]
    name = Path(path).name
    if name.startswith("python") or name.startswith("libpython"):
        return "python"
    return name.split(".so", 1)[0] if ".so" in name else name


def smaps_by_group(pid: int) -> dict[str, dict[str, int]]:
    """Resident kB per mapping group from /proc/PID/smaps: rss, pss and private (clean + dirty)."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: {"rss": 0, "pss": 0, "private": 0})
    group = "[anon]"
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head, _, rest = line.partition(" ")
            if "-" in head and not head.endswith(":"):  # a mapping's header: range perms offset dev inode [path]
                parts = line.split(None, 5)
                group = mapping_group(parts[5].strip() if len(parts) > 5 else "")
            elif head == "Rss:":
                out[group]["rss"] += int(rest.split()[0])
            elif head == "Pss:":
                out[group]["pss"] += int(rest.split()[0])
            elif head in ("Private_Clean:", "Private_Dirty:"):
                out[group]["private"] += int(rest.split()[0])
    return dict(out)


class TreeSampler(TreeThread):
    """Samples a process tree on a thread: each process's peaks and time series, the tree's summed RSS,
    USS and PSS, every process's mapping groups at the tree's peak summed RSS (``bench/vs_trl``'s
    figure), and each process's groups at its own peak PSS. Reading smaps costs milliseconds per
    process, so a snapshot is retaken at most every ``snapshot_every_s``."""

    name = "memory-sampler"

    def __init__(self, root: int, every_s: float, series_every_s: float = 15.0, snapshot_every_s: float = 5.0) -> None:
        super().__init__(root, every_s)
        self.series_every_s = series_every_s  # how often a process's RSS and USS go in its time series
        self.snapshot_every_s = snapshot_every_s
        self._series_at = -series_every_s
        self._tree_snapshot_at = -snapshot_every_s
        self.started = time.monotonic()
        self.procs: dict[int, dict] = {}
        self.tree_peak = {"rss": 0, "uss": 0, "pss": 0}
        self.tree_peak_at = {"rss": 0.0, "uss": 0.0, "pss": 0.0}
        self.at_peak: dict[int, dict] = {}  # pid -> {"rss": bytes, "groups": smaps groups}, at the tree's peak RSS
        self.at_peak_s = 0.0
        self.samples = 0

    def sample(self) -> None:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        now = round(time.monotonic() - self.started, 1)
        in_series = now - self._series_at >= self.series_every_s
        if in_series:
            self._series_at = now
        totals = {"rss": 0, "uss": 0, "pss": 0}
        rss_now: dict[int, int] = {}
        for p in procs:
            try:
                with p.oneshot():
                    m = p.memory_full_info()
                    cmd = p.cmdline()
                    threads = p.num_threads()
            except psutil.Error:
                continue
            rec = self.procs.setdefault(p.pid, {"label": label(cmd), "pid": p.pid, "first_s": now, "rss": 0, "uss": 0,
                                               "pss": 0, "threads": 0, "groups": {}, "groups_at_s": -1e9,
                                               "series": []})
            if in_series:
                rec["series"].append((now, round(m.rss / MIB), round(m.uss / MIB)))
            rec["last_s"] = now
            rec["threads"] = max(rec["threads"], threads)
            rss_now[p.pid] = m.rss
            for k in totals:
                v = getattr(m, k)
                totals[k] += v
                rec[k] = max(rec[k], v)
            if m.pss >= rec["pss"] and now - rec["groups_at_s"] >= self.snapshot_every_s:
                self._snapshot(p.pid, rec, now)
        if totals["rss"] > self.tree_peak["rss"] and now - self._tree_snapshot_at >= self.snapshot_every_s:
            self._tree_snapshot_at, self.at_peak_s = now, now
            self.at_peak = {pid: {"rss": rss, "groups": _groups(pid)} for pid, rss in rss_now.items()}
        for k, v in totals.items():
            if v > self.tree_peak[k]:
                self.tree_peak[k], self.tree_peak_at[k] = v, now
        self.samples += 1

    @staticmethod
    def _snapshot(pid: int, rec: dict, now: float) -> None:
        rec["groups"], rec["groups_at_s"] = _groups(pid), now


def _groups(pid: int) -> dict[str, dict[str, int]]:
    try:
        return smaps_by_group(pid)
    except OSError:  # the process ended meanwhile
        return {}


def footprint(at_peak: dict[int, dict]) -> dict[str, float]:
    """What the tree holds at its peak, each file counted once: every process's anonymous memory,
    plus for each mapped file group the largest resident set any one process has of it (the pages
    the processes share are resident once)."""
    anon = sum(d["groups"].get("[anon]", {}).get("rss", 0) for d in at_peak.values())
    files: dict[str, int] = {}
    for d in at_peak.values():
        for g, v in d["groups"].items():
            if g != "[anon]":
                files[g] = max(files.get(g, 0), v["rss"])
    return {"anon_mib": round(anon / 1024, 1), "files_once_mib": round(sum(files.values()) / 1024, 1),
            "footprint_mib": round((anon + sum(files.values())) / 1024, 1)}


def prepared_config(config: str | None, model_dir: Path, out: Path) -> Path:
    """The config with its preparation step skipped: both roles load ``model_dir``, a model an earlier
    ``up`` prepared (``<run_dir>/model``), as ``bench/vs_trl.py`` runs it from its shared checkpoint."""
    from importlib import resources

    import msgspec

    path = Path(config) if config else Path(str(resources.files("rlvr.cli").joinpath("builtin.toml")))
    raw = msgspec.toml.decode(path.read_bytes())
    raw["learn"].pop("prepare", None)
    raw["rollout"]["engine"]["model"] = str(model_dir)
    raw["learn"]["engine"]["model_path"] = str(model_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(msgspec.json.encode(raw))
    return out


def run_up(args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "rlvr.cli.main", "up", "--display", "plain", "--run-dir", str(args.run_dir)]
    if args.prepared:
        cmd += ["--config", str(prepared_config(args.config, args.prepared, Path(f"{args.run_dir}.config.json")))]
    elif args.config:
        cmd += ["--config", args.config]
    for item in args.set:
        cmd += ["--set", item]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONUNBUFFERED": "1"}
    args.run_dir.parent.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    with open(f"{args.run_dir}.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            with TreeSampler(proc.pid, args.every_s) as sampler:
                proc.wait(timeout=args.timeout_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            proc.wait(120)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    return {
        "command": " ".join(["OMP_NUM_THREADS=" + env["OMP_NUM_THREADS"], "rlvr-actor", *cmd[3:]]),
        "exit": proc.returncode, "wall_s": round(time.monotonic() - sampler.started, 1),
        "load1_before": round(load_before, 2), "every_s": args.every_s, "samples": sampler.samples,
        "tree_peak_mib": {k: round(v / MIB, 1) for k, v in sampler.tree_peak.items()},
        "tree_peak_at_s": sampler.tree_peak_at,
        "at_tree_peak": {"at_s": sampler.at_peak_s, **footprint(sampler.at_peak)},
        "processes": [
            {**{k: v for k, v in rec.items() if k not in ("groups", "groups_at_s")},
             **{k: round(rec[k] / MIB, 1) for k in ("rss", "uss", "pss")},
             "rss_at_tree_peak": round(sampler.at_peak.get(rec["pid"], {}).get("rss", 0) / MIB, 1),
             "anon_at_tree_peak": round(sampler.at_peak.get(rec["pid"], {}).get("groups", {})
                                        .get("[anon]", {}).get("rss", 0) / 1024, 1),
             "groups_mib": _mib(rec["groups"]),
             "groups_at_tree_peak_mib": _mib(sampler.at_peak.get(rec["pid"], {}).get("groups", {}))}
            for rec in sorted(sampler.procs.values(), key=lambda r: -r["pss"])
        ],
    }


def _mib(groups: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    return {g: {k: round(v / 1024, 1) for k, v in d.items()} for g, d in sorted(groups.items(), key=lambda kv: -kv[1]["rss"])}


def markdown(result: dict, top: int = 6) -> str:
    peak = result["tree_peak_mib"]
    lines = [
        f"Command: `{result['command']}`  ",
        f"exit {result['exit']}, {result['wall_s']} s, {result['samples']} samples every {result['every_s']} s, "
        f"load average before {result['load1_before']}  ",
        f"Tree peak, summed over its processes: RSS {peak['rss']} MiB, PSS {peak['pss']} MiB, "
        f"USS {peak['uss']} MiB (at {result['tree_peak_at_s']['rss']} / {result['tree_peak_at_s']['pss']} / "
        f"{result['tree_peak_at_s']['uss']} s)  ",
        f"At the peak summed RSS ({result['at_tree_peak']['at_s']} s), each file's pages counted once: anonymous "
        f"{result['at_tree_peak']['anon_mib']} MiB + files {result['at_tree_peak']['files_once_mib']} MiB = "
        f"**{result['at_tree_peak']['footprint_mib']} MiB**",
        "",
        "| process | pid | alive s | threads | RSS at the tree's peak | anonymous then | peak RSS | peak USS | peak PSS "
        "| resident at its peak PSS: group RSS (private), MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in result["processes"]:
        groups = ", ".join(f"{g} {d['rss']:.0f} ({d['private']:.0f})"
                           for g, d in list(p["groups_mib"].items())[:top])
        lines.append(f"| {p['label']} | {p['pid']} | {p['first_s']}–{p['last_s']} | {p['threads']} | "
                     f"{p['rss_at_tree_peak']} | {p['anon_at_tree_peak']} | {p['rss']} | {p['uss']} | {p['pss']} | {groups} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="TOML config (default: the built-in example)")
    p.add_argument("--prepared", type=Path, metavar="MODEL_DIR",
                   help="skip the preparation step: both roles load this prepared model (an earlier run's <run_dir>/model)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to `up` as --set")
    p.add_argument("--run-dir", type=Path, default=Path("/tmp/memory_by_process/run"))
    p.add_argument("--every-s", type=float, default=1.0)
    p.add_argument("--timeout-s", type=float, default=1800)
    p.add_argument("--note", default="", help="a line kept with the result (what changed, the machine)")
    p.add_argument("--out", type=Path, help="append the result as one JSON line")
    args = p.parse_args()
    result = run_up(args)
    result["note"] = args.note
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")
    print(markdown(result))
    return 0 if result["exit"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
