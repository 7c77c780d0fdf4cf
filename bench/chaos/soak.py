"""The soak: the built-in example under `rlvr-actor up` for an hour, a light fault every few
minutes, and every role's resources sampled each minute, to find slow leaks.

    python -m bench.chaos --soak --minutes 60          # writes bench/results/soak.jsonl and soak.png

Each minute (``sample``): every role's RSS, open file descriptors and thread count (the role's
process with its children: a verifier's pool workers count as the verifier's; psutil), the
NATS store (its directory on disk, each of the run's streams' bytes against its ``max_bytes``,
the account's storage against its limit) and the load average. The verdict (``judge``, pure):
the soak fails if any role's (learner, rollout, verifier: the nats-server's memory follows the
store it keeps, judged by the store's limits instead) RSS or open fds grow by more than 10% between minute 10 (a sixth
of the run when it is shorter than an hour) and the end, compared on the median of three
samples at each end so one sample taken mid-fault decides nothing, or if the store exceeds a
configured limit in any sample, or if the run stopped before its time.

The faults (``FAULTS``) are ones `up` survives without an operator: a role paused (SIGSTOP)
for a few seconds, a verifier's pool worker SIGKILLed (the pool replaces it), a malformed
message on ROLLOUTS (dead-lettered). `up` stops the run when a fixed role exits, so a role
SIGKILL is the chaos run's fault, not the soak's.

Not here: the fault-injection runner and its invariants (``run``, ``invariants``).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import nats

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
GROWTH_LIMIT = 0.10  # RSS and fds may grow at most this much between the baseline minute and the end
JUDGED = ("rss_mib", "fds")
# Sampled and drawn, not judged on growth: the server's memory follows the store it keeps
# (SCORED is kept for replay up to its limits), and the store is judged against those limits.
NOT_JUDGED = {"nats-server"}
_REPLICA = re.compile(r"--replica\s+(\S+)")


# --- sampling ------------------------------------------------------------------------
def role_of(cmdline: list[str]) -> str | None:
    """The replica a process is (``--replica NAME``), ``nats-server``, or None."""
    if cmdline and os.path.basename(cmdline[0]).startswith("nats-server"):
        return "nats-server"
    m = _REPLICA.search(" ".join(cmdline))
    return m.group(1) if m else None


def sample_processes(root_pid: int) -> dict[str, dict]:
    """RSS (MiB), open fds and threads of each role under ``root_pid``, each role's descendants
    (pool workers, sandboxes) counted with it."""
    import psutil

    out: dict[str, dict] = {}
    try:
        procs = psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return out
    owner: dict[int, str] = {}
    for p in procs:  # parents come before their children in psutil's walk order
        try:
            role = role_of(p.cmdline()) or owner.get(p.ppid())
            if role is None:
                continue
            owner[p.pid] = role
            with p.oneshot():
                rss, fds, threads = p.memory_info().rss, p.num_fds(), p.num_threads()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        r = out.setdefault(role, {"rss_mib": 0.0, "fds": 0, "threads": 0, "processes": 0})
        r["rss_mib"] += rss / 2**20
        r["fds"] += fds
        r["threads"] += threads
        r["processes"] += 1
    for r in out.values():
        r["rss_mib"] = round(r["rss_mib"], 1)
    return out


def dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass  # a file the server removed meanwhile
    return total


async def _store(url: str, run: str) -> dict:
    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=1)
    try:
        js = nc.jetstream(timeout=10)
        streams = {}
        for info in await js.streams_info():
            name = info.config.name
            if run not in name:
                continue
            streams[name] = {"bytes": info.state.bytes, "messages": info.state.messages,
                             "max_bytes": info.config.max_bytes if (info.config.max_bytes or -1) > 0 else None}
        acct = await js.account_info()
        limit = acct.limits.max_storage if acct.limits and (acct.limits.max_storage or -1) > 0 else None
        return {"streams": streams, "account_storage": acct.storage, "account_max_storage": limit}
    finally:
        await nc.close()


def sample_store(url: str, run: str, store_dir: Path) -> dict:
    """The run's streams and the account's storage (from the server), and the store directory's size."""
    try:
        out = anyio.run(_store, url, run)
    except Exception as e:  # noqa: BLE001 (a sample that failed is recorded as such, the soak goes on)
        out = {"error": f"{type(e).__name__}: {e}"}
    out["dir_bytes"] = dir_bytes(store_dir)
    return out


# --- the verdict (pure) ----------------------------------------------------------------
def _median_near(values: dict[float, float], minute: float, width: int = 3) -> float | None:
    """The median of the ``width`` samples nearest ``minute``."""
    near = sorted(values, key=lambda m: (abs(m - minute), m))[:width]
    return statistics.median(values[m] for m in near) if near else None


def judge(samples: list[dict], *, minutes: float, stopped_early: str | None = None,
          limit: float = GROWTH_LIMIT) -> dict:
    """The soak's verdict over its per-minute ``samples`` (``minute``, ``roles``, ``store``).

    Growth of each role's RSS and fds from the baseline (minute 10 of an hour: a sixth of the
    run) to the end, each end the median of its three nearest samples; the store against its
    limits in every sample; threads are reported, not judged (a pool grows and shrinks them)."""
    baseline = minutes / 6
    end = max((s["minute"] for s in samples), default=0.0)
    findings: list[str] = []
    growth: dict[str, dict[str, float]] = {}
    if stopped_early:
        findings.append(f"the run stopped before its time: {stopped_early}")
    if end < baseline + 1:
        findings.append(f"too few samples to judge: the last at minute {end}, the baseline is minute {baseline:g}")
    roles = sorted({r for s in samples for r in s.get("roles", {})} - NOT_JUDGED)
    for role in roles:
        for metric in JUDGED:
            series = {s["minute"]: s["roles"][role][metric] for s in samples if role in s.get("roles", {})}
            at_base = {m: v for m, v in series.items() if m >= baseline - 1}
            first, last = _median_near(at_base, baseline), _median_near(series, end)
            if first is None or last is None or not first:
                continue
            g = (last - first) / first
            growth.setdefault(role, {})[metric] = round(g, 4)
            if g > limit:
                findings.append(f"{role} {metric} grew {g:.1%} (from {first:g} at minute ~{baseline:g} "
                                f"to {last:g} at minute ~{end:g}; the limit is {limit:.0%})")
    for s in samples:
        store = s.get("store", {})
        for name, st in store.get("streams", {}).items():
            if st.get("max_bytes") and st["bytes"] > st["max_bytes"]:
                findings.append(f"minute {s['minute']}: stream {name} holds {st['bytes']} bytes, over its "
                                f"max_bytes {st['max_bytes']}")
        cap = store.get("account_max_storage")
        if cap and store.get("account_storage", 0) > cap:
            findings.append(f"minute {s['minute']}: JetStream storage {store['account_storage']} over its limit {cap}")
    return {"ok": not findings, "findings": findings, "growth": growth, "baseline_minute": baseline,
            "last_minute": end, "limit": limit}


# --- the light faults ------------------------------------------------------------------
def _pid_of(root_pid: int, replica: str) -> int | None:
    import psutil

    for p in psutil.Process(root_pid).children(recursive=True):
        try:
            if role_of(p.cmdline()) == replica and not any(
                    role_of(q.cmdline()) == replica for q in p.parents()):
                return p.pid
        except psutil.Error:
            continue
    return None


def pause(replica: str, seconds: float) -> Callable[[dict], dict]:
    def fault(ctx: dict) -> dict:
        pid = _pid_of(ctx["up_pid"], replica)
        if pid is None:
            return {"kind": f"sigstop:{replica}", "skipped": "not running"}
        os.kill(pid, signal.SIGSTOP)
        time.sleep(seconds)
        os.kill(pid, signal.SIGCONT)
        return {"kind": f"sigstop:{replica}", "paused_s": seconds}
    return fault


def kill_pool_worker(replica: str) -> Callable[[dict], dict]:
    def fault(ctx: dict) -> dict:
        import psutil

        pid = _pid_of(ctx["up_pid"], replica)
        kids = psutil.Process(pid).children() if pid else []
        if not kids:
            return {"kind": f"sigkill:{replica}:pool_worker", "skipped": "no worker process"}
        os.kill(kids[0].pid, signal.SIGKILL)
        return {"kind": f"sigkill:{replica}:pool_worker", "pid": kids[0].pid}
    return fault


def poison_rollouts(ctx: dict) -> dict:
    async def go():
        nc = await nats.connect(ctx["url"], connect_timeout=5, max_reconnect_attempts=1)
        try:
            n = ctx.setdefault("poisoned", 0) + 1
            ctx["poisoned"] = n
            await nc.jetstream(timeout=10).publish(f"rlvr.{ctx['run']}.rollouts", b"\x00soak: not msgpack",
                                                  headers={"Nats-Msg-Id": f"soak-poison-{n}"})
        finally:
            await nc.close()

    anyio.run(go)
    return {"kind": "poison:rollouts", "n": ctx["poisoned"]}


FAULTS: list[Callable[[dict], dict]] = [
    pause("verify-0", 5.0), poison_rollouts, pause("rollout-0", 3.0), kill_pool_worker("verify-1"),
    pause("learn-0", 3.0), pause("verify-1", 5.0),
]


# --- the run ---------------------------------------------------------------------------
def _wait_started(out: Path, proc: subprocess.Popen, timeout_s: float) -> str:
    """The nats URL once `up` has started every role (its "started ..." line)."""
    deadline = time.monotonic() + timeout_s
    url = None
    while time.monotonic() < deadline:
        text = out.read_text(errors="replace") if out.exists() else ""
        m = re.search(r"nats-server on (nats://\S+)", text)
        url = m.group(1) if m else url
        if url and re.search(r"^.*started .*learn-0", text, re.M):
            return url
        if proc.poll() is not None:
            raise RuntimeError(f"rlvr-actor up exited {proc.returncode} before starting: {text[-1500:]}")
        time.sleep(1.0)
    raise RuntimeError(f"rlvr-actor up did not start its roles within {timeout_s}s")


def _last_errors(logs: Path) -> str:
    """Each role log's last error line (a role that exited 2 refused its config: this says why),
    kept in the verdict: the logs themselves go with the run directory."""
    found = []
    for log in sorted(logs.glob("*.log")):
        lines = [ln for ln in log.read_text(errors="replace").splitlines()
                 if '"level": "error"' in ln or ln.startswith("rlvr-actor: ")]  # a config refused: stderr
        if lines:
            found.append(f"{log.stem}: {lines[-1][:600]}")
    return "".join(f"\n{f}" for f in found)


def run_soak(work: Path, minutes: float, seed: int, fault_every_min: float, jsonl: Path, plot: Path | None) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    run_dir, out = work / "run", work / "up.out"
    if run_dir.exists() and any(run_dir.iterdir()):
        # `up` would resume it: a learner already at its steps exits 0 at once and the soak measures nothing.
        raise SystemExit(f"{run_dir} holds an earlier run; a soak starts from a fresh one: pass another --work-dir")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "rlvr.cli", "up", "--run-dir", str(run_dir), "--display", "plain",
            "--set", "learn.steps=1000000"]
    rng = random.Random(seed)
    faults = FAULTS[:]
    rng.shuffle(faults)
    with open(out, "wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=work, start_new_session=True)
    samples: list[dict] = []
    fault_log: list[dict] = []
    stopped = None
    jsonl.parent.mkdir(parents=True, exist_ok=True)
    try:
        url = _wait_started(out, proc, timeout_s=1800)
        ctx = {"up_pid": proc.pid, "url": url, "run": "builtin"}
        t0 = time.monotonic()
        next_fault = fault_every_min * 60
        with open(jsonl, "w") as f:
            f.write(json.dumps({"soak": {"minutes": minutes, "seed": seed, "fault_every_min": fault_every_min,
                                         "command": " ".join(["python -m bench.chaos", *sys.argv[1:]]),
                                         "cpus": os.cpu_count(), "started_at": time.time()}}) + "\n")
            for minute in range(int(minutes) + 1):
                while (now := time.monotonic() - t0) < minute * 60:
                    if proc.poll() is not None:
                        break
                    if now >= next_fault:
                        rec = faults[len(fault_log) % len(faults)](ctx)
                        rec["minute"] = round(now / 60, 2)
                        fault_log.append(rec)
                        f.write(json.dumps({"fault": rec}) + "\n")
                        f.flush()
                        print(f"[soak] minute {rec['minute']}: {rec}", flush=True)
                        next_fault += fault_every_min * 60
                    time.sleep(min(1.0, max(0.05, minute * 60 - now)))
                if proc.poll() is not None:
                    stopped = (f"rlvr-actor up exited {proc.returncode} at minute {minute}: {out.read_text()[-800:]}"
                               + _last_errors(run_dir / "logs"))
                    break
                s = {"minute": minute, "t": time.time(), "roles": sample_processes(proc.pid),
                     "store": sample_store(url, ctx["run"], run_dir / "nats"), "load": os.getloadavg()}
                samples.append(s)
                f.write(json.dumps(s) + "\n")
                f.flush()
                print(f"[soak] minute {minute}: " + ", ".join(
                    f"{r} {v['rss_mib']:.0f}MiB/{v['fds']}fd/{v['threads']}t" for r, v in sorted(s["roles"].items()))
                      + f"; store {s['store'].get('dir_bytes', 0) / 2**20:.1f} MiB; load {s['load'][0]:.2f}",
                      flush=True)
            verdict = judge(samples, minutes=minutes, stopped_early=stopped)
            verdict["faults"] = len(fault_log)
            f.write(json.dumps({"verdict": verdict}) + "\n")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)  # `up` stops its roles in order, then the server
            try:
                proc.wait(180)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    if plot is not None and samples:
        draw(samples, fault_log, plot)
    return verdict


def draw(samples: list[dict], faults: list[dict], path: Path) -> None:
    """Four panels over minutes: RSS, fds and threads per role, and the store's size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
    roles = sorted({r for s in samples for r in s["roles"]})
    for ax, metric, title in zip(axes.flat, ("rss_mib", "fds", "threads"), ("RSS (MiB)", "open fds", "threads")):
        for role in roles:
            pts = [(s["minute"], s["roles"][role][metric]) for s in samples if role in s["roles"]]
            ax.plot(*zip(*pts), label=role, marker=".")
        ax.set_title(title)
    ax = axes.flat[3]
    ax.plot([s["minute"] for s in samples], [s["store"].get("dir_bytes", 0) / 2**20 for s in samples], marker=".",
            label="store dir")
    ax.set_title("NATS store (MiB)")
    for a in axes.flat:
        for fr in faults:
            a.axvline(fr["minute"], color="grey", alpha=0.2, lw=1)
        a.set_xlabel("minute")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("soak: the built-in example under rlvr-actor up, light faults (grey lines)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(minutes: float, seed: int, work: Path, fault_every_min: float = 3.0,
         jsonl: Path = RESULTS / "soak.jsonl", plot: Path | None = RESULTS / "soak.png") -> int:
    verdict = run_soak(work, minutes, seed, fault_every_min, jsonl, plot)
    print(json.dumps(verdict, indent=2))
    return 0 if verdict["ok"] else 1
