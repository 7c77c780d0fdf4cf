"""The scale bench's report: ``scale.md`` (the figures, level by level, and what broke first) and
``scale.png`` (bytes/s per stream against the number of rollout replicas, measured).

Definitions used in every table:

- a samples stream's **MB/s** (ROLLOUTS, SCORED) is what its publishers' connections sent the servers
  (``/connz`` in_bytes of the rollouts, of the verifiers: the messages with their headers and protocol,
  plus the role's acks and heartbeats, a few hundred bytes a second); "stored" beside SCORED's is its
  messages per second (the stream's last sequence) times its mean stored message size (bytes held over
  messages held). TASKS's is its tasks per second times their mean stored size (the learner's
  connection also carries its acks);
- **CPU s/GB** is a process group's CPU seconds over the window per GB stored on ROLLOUTS (the samples
  the run carried), so every role and node is weighed against the same bytes;
- **latency** stages come from the samples' own timings and the streams' timestamps (meter.py); "the
  bus" is from the rollout's publish to the learner's delivery. "queued for a rollout" is set by the
  run (the feeder keeps learn.max_inflight_tasks out: at the low levels most of them wait in TASKS).

Not here: taking the readings (meter.py, run.py).
"""

from __future__ import annotations

import math
from pathlib import Path

from bench.scale.meter import KINDS

MB = 1e6
NODES = ("rlvr-nats-1", "rlvr-nats-2", "rlvr-nats-3")


def _f(x: float | None, nd: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{nd}f}"


def level_line(lv: dict) -> str:
    s = lv["streams"]
    kept = f" ({lv['kept_share']:.0%} of offered)" if lv.get("kept_share") is not None else ""
    e2e = lv["latency"].get("stages", {}).get("end_to_end", {})
    return (f"  {lv['rollouts']:>2} rollouts: {lv['samples_s']:7.1f} samples/s, {lv['tokens_s'] / 1e3:8.1f}k tok/s{kept}; "
            f"MB/s TASKS {s['TASKS']['bytes_s'] / MB:.2f} ROLLOUTS {s['ROLLOUTS']['bytes_s'] / MB:.2f} "
            f"SCORED {s['SCORED']['bytes_s'] / MB:.2f}; e2e p50 {_f(e2e.get('p50'), 2)} s p99 {_f(e2e.get('p99'), 2)} s; "
            f"machine {lv['machine_busy_share']:.0%} busy")


def _gb(lv: dict) -> float:
    return lv["streams"]["ROLLOUTS"]["bytes_s"] * lv["seconds"] / 1e9


def _p50(lv: dict, stage: str) -> float:
    return lv["latency"].get("stages", {}).get(stage, {}).get("p50", float("nan"))


def diagnose(levels: list[dict], cpus: int, saturated: float) -> tuple[dict | None, list[str]]:
    """The first level that kept less than ``saturated`` of what it was offered (else the last), and what
    its readings say was at its limit. A queue builds before the hop that cannot keep up, so the hops
    come first (the learner's ingest, then the verifiers), then what they ran on."""
    if not levels:
        return None, ["no level was measured"]
    first = next((lv for lv in levels if lv.get("kept_share") is not None and lv["kept_share"] < saturated), None)
    lv, base = first or levels[-1], levels[0]
    found: list[str] = []
    cores, streams = lv["cpu_cores"], lv["streams"]
    for stage, kind, who in (("to_learner", "SCORED", "the learner's ingest"), ("to_scored", "ROLLOUTS", "the verifiers")):
        now, then = _p50(lv, stage), _p50(base, stage)
        s = streams[kind]
        grew = s["pending_end"] - s["pending_start"]
        if (now > max(1.0, 5 * then)) or grew > max(4, 0.05 * s["msgs_s"] * lv["seconds"]):
            took = (f"the learner was delivered {s['delivered_msgs_s']:.1f} msg/s of {s['msgs_s']:.1f} stored, "
                    f"on {cores.get('learn', 0):.2f} of a core" if kind == "SCORED" else
                    f"the verifiers took {s['delivered_msgs_s']:.1f} msg/s of {s['msgs_s']:.1f} published, "
                    f"on {cores.get('verify', 0):.2f} cores")
            found.append(f"**{who}**: {kind} -> its consumer p50 {then:.2f} s at {base['rollouts']} replicas, "
                         f"{now:.2f} s here; pending {s['pending_start']} -> {s['pending_end']}; {took}")
    outstanding, limit = lv.get("learner", {}).get("outstanding_tasks_max", 0), lv.get("max_inflight_tasks", 0)
    # Every task out, and none left waiting in TASKS: the rollouts had nothing to generate.
    if limit and outstanding >= 0.95 * limit and streams["TASKS"]["pending_end"] < lv["rollouts"]:
        found.append(f"**the feeder's window**: {outstanding:.0f} of learn.max_inflight_tasks = {limit} tasks out, "
                     f"so the rollouts waited for tasks (TASKS pending {streams['TASKS']['pending_end']} at the end): "
                     "a setting of the run, not the bus")
    if lv["machine_busy_share"] >= 0.9:
        ours = sum(cores.values())
        found.append(f"**the machine's CPU**: {lv['machine_busy_share']:.0%} of its {cpus} cores busy, this run's "
                     f"processes {ours:.2f} cores of it (the rest: other work on the machine)")
    per_process = {"learn": cores.get("learn", 0.0), "verify": cores.get("verify", 0.0) / max(1, lv["verifiers"]),
                   "rollout": cores.get("rollout", 0.0) / max(1, lv["rollouts"])}
    for role, c in sorted(per_process.items(), key=lambda kv: -kv[1]):
        if c >= 0.85:
            found.append(f"**one {role} process at {c:.2f} of a core** (a role's event loop is one thread)")
    node_cpu = {n: cores.get(n, 0.0) for n in NODES}
    leaders = {n: lv["nodes"].get(n, {}).get("leads", []) for n in NODES}
    busiest = max(node_cpu, key=node_cpu.get)
    others = [c for n, c in node_cpu.items() if n != busiest]
    if others and node_cpu[busiest] > 1.5 * max(others) and leaders[busiest]:
        found.append(f"**the leader's node**: {busiest} (leads {', '.join(leaders[busiest])}) at "
                     f"{node_cpu[busiest]:.2f} cores, the others {', '.join(f'{c:.2f}' for c in others)}")
    for role, c in sorted(lv["roles"].items()):
        if c.get("keep_alive_stalls", 0):
            found.append(f"**the {role} role's event loop** stalled {int(c['keep_alive_stalls'])} times (keep_alive_stalled: "
                         "10 s or more without running), taking no message meanwhile")
    retried = {role: c.get("naked", 0) + c.get("bus_retries", 0) + c.get("faults", 0) for role, c in lv["roles"].items()}
    if any(retried.values()):
        found.append("**client backpressure**: " + ", ".join(f"{r} {int(v)} naks/retries/faults"
                                                           for r, v in retried.items() if v))
    if not found:
        found.append("nothing at its limit: every process under 0.85 of a core, no backlog growing, no naks")
    return lv, found


def _md_tables(result: dict) -> list[str]:
    levels = result["levels"]
    lines = ["## Throughput per level", "",
             "| rollouts | offered tok/s | kept tok/s (share) | samples/s | tokens/sample (mean, max) | B/token | "
             "TASKS kB/s | ROLLOUTS MB/s | SCORED MB/s (stored) | SCORED msg/s | learner msg/s |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for lv in levels:
        s, lat = lv["streams"], lv["latency"]
        share = f" ({lv['kept_share']:.0%})" if lv.get("kept_share") is not None else ""
        lines.append(
            f"| {lv['rollouts']} | {_f(lv['offered_tokens_s'], 0)} | {_f(lv['tokens_s'], 0)}{share} | {_f(lv['samples_s'])} "
            f"| {_f(lat.get('tokens_mean'), 0)}, {lat.get('tokens_max', 0):,} | {_f(lat.get('bytes_per_token'))} "
            f"| {_f(s['TASKS']['bytes_s'] / 1e3, 1)} | {_f(s['ROLLOUTS']['bytes_s'] / MB, 2)} "
            f"| {_f(s['SCORED']['bytes_s'] / MB, 2)} ({_f(s['SCORED']['stored_bytes_s'] / MB, 2)}) | {_f(s['SCORED']['msgs_s'], 2)} "
            f"| {_f(s['SCORED']['delivered_msgs_s'], 2)} |")
    lines += ["", "## CPU per level: cores busy, and CPU seconds per GB of samples (ROLLOUTS)", "",
              "| rollouts | machine busy | learn | verify (all) | rollout (all) | " + " | ".join(NODES)
              + " | bench | learn s/GB | verify s/GB | rollout s/GB | nats-server s/GB (3 nodes) |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for lv in levels:
        c, gb = lv["cpu_cores"], _gb(lv)
        per_gb = {k: c.get(k, 0.0) * lv["seconds"] / gb if gb else None for k in ("learn", "verify", "rollout")}
        nats_gb = sum(c.get(n, 0.0) for n in NODES) * lv["seconds"] / gb if gb else None
        lines.append(
            f"| {lv['rollouts']} | {lv['machine_busy_share']:.0%} | {_f(c.get('learn'), 2)} | {_f(c.get('verify'), 2)} "
            f"| {_f(c.get('rollout'), 2)} | " + " | ".join(_f(c.get(n), 2) for n in NODES)
            + f" | {_f(c.get('bench'), 2)} | {_f(per_gb['learn'], 0)} | {_f(per_gb['verify'], 0)} "
            f"| {_f(per_gb['rollout'], 0)} | {_f(nats_gb, 0)} |")
    lines += ["", "## Latency per level (seconds; p50 / p90 / p99 of the SCORED messages read back)", "",
              "| rollouts | read | task created -> learner (end to end) | queued for a rollout | generating "
              "| published -> learner (the bus) | published -> verdict stored | stored -> learner "
              "| delivery known to (p50 s) |",
              "| ---: | ---: | --- | --- | --- | --- | --- | --- | ---: |"]
    for lv in levels:
        lat = lv["latency"]
        st = lat.get("stages", {})

        def cell(k: str) -> str:
            v = st.get(k, {})
            return f"{_f(v.get('p50'), 2)} / {_f(v.get('p90'), 2)} / {_f(v.get('p99'), 2)}"

        lines.append(f"| {lv['rollouts']} | {lat.get('messages_read', 0)} | {cell('end_to_end')} | {cell('queued')} "
                     f"| {cell('generate')} | {cell('bus')} | {cell('to_scored')} | {cell('to_learner')} "
                     f"| {_f(lat.get('delivery_bracket_p50_s'), 2)} |")
    lines += ["", "## The nodes per level: network, disk, store, leaders", "",
              "| rollouts | node | leads | in MB/s | out MB/s | disk writes MB/s | store MB (growth MB/s) | RSS MB |",
              "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for lv in levels:
        for n in NODES:
            v = lv["nodes"].get(n)
            if v is None:
                continue
            lines.append(f"| {lv['rollouts']} | {n} | {', '.join(v['leads']) or '-'} | {_f(v['in_bytes_s'] / MB, 2)} "
                         f"| {_f(v['out_bytes_s'] / MB, 2)} | {_f(v['disk_write_bytes_s'] / MB, 2)} "
                         f"| {_f(v['store_bytes'] / MB, 0)} ({_f(v['store_growth_bytes_s'] / MB, 2)}) | {_f(v['mem'] / MB, 0)} |")
    lines += ["", "## Backpressure per level", "",
              "| rollouts | tasks out (most / learn.max_inflight_tasks) | TASKS pending (start -> end) | ROLLOUTS pending "
              "| SCORED pending (learner) | SCORED ack pending (held) | redelivered, held (change) "
              "| naks / retries / faults / loop stalls by role "
              "| slow consumers |",
              "| ---: | --- | --- | --- | --- | ---: | ---: | --- | ---: |"]
    for lv in levels:
        s = lv["streams"]
        redelivered = sum(s[k]["redelivered"] for k in KINDS)
        roles = ", ".join(f"{r} {int(c.get('naked', 0))}/{int(c.get('bus_retries', 0))}/{int(c.get('faults', 0))}"
                          f"/{int(c.get('keep_alive_stalls', 0))}" for r, c in sorted(lv["roles"].items()))
        slow = sum(v["slow_consumers"] for v in lv["nodes"].values())
        out_max = lv.get("learner", {}).get("outstanding_tasks_max", 0)
        lines.append(f"| {lv['rollouts']} | {out_max:.0f} / {lv.get('max_inflight_tasks', '-')} "
                     f"| {s['TASKS']['pending_start']} -> {s['TASKS']['pending_end']} "
                     f"| {s['ROLLOUTS']['pending_start']} -> {s['ROLLOUTS']['pending_end']} "
                     f"| {s['SCORED']['pending_start']} -> {s['SCORED']['pending_end']} | {s['SCORED']['ack_pending_end']} "
                     f"| {redelivered} | {roles} | {slow} |")
    return lines


def figure(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = result["levels"]
    x = [lv["rollouts"] for lv in levels]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for kind, style in zip(KINDS, ("s-", "o-", "^-"), strict=True):
        ax.plot(x, [lv["streams"][kind]["bytes_s"] / MB for lv in levels], style, label=kind)
    bpt = [lv["latency"].get("bytes_per_token", 0.0) for lv in levels]
    if result["shape"]["tokens_per_s"] and any(bpt):
        per = sum(bpt) / len([b for b in bpt if b])
        ax.plot(x, [lv["offered_tokens_s"] * per / MB for lv in levels], "k--", lw=1,
                label=f"offered ({result['shape']['tokens_per_s']:,.0f} tok/s per replica x {per:.1f} B/token)")
    ax.set_xlabel("rollout replicas")
    ax.set_ylabel("MB/s into the stream (log scale)")
    ax.set_yscale("log")  # TASKS carries prompts: three orders of magnitude under the samples
    ax.set_title(f"bytes/s per stream, 3-node R3 cluster, {result['cpus']} cores (measured)")
    ax.set_xticks(x)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write(result: dict, out: Path, saturated: float = 0.8) -> None:
    shape = result["shape"]
    png = out.with_suffix(".png")
    figure(result, png)
    lv, found = diagnose(result["levels"], result["cpus"] or 1, saturated)
    lines = [
        "# R1's step on a 3-node JetStream cluster, measured (bench/scale)", "",
        f"`{result['command']}` at `{result['commit'] or '(no git)'}`"
        f"{' (working tree differs: ' + str(len(result['dirty'])) + ' files)' if result['dirty'] else ''}, "
        f"{result['date']}, {result['cpus']} cores, load average {result['loadavg_before'][0]} before and "
        f"{result.get('loadavg_after', ['-'])[0]} after.", "",
        f"Three nats-server nodes (ops/nats/cluster/n1-3.conf on loopback ports), R3 file streams. The real roles: "
        f"the dry learner, {shape['verifiers']} verifiers (`exact`), and a ladder of rollout replicas on the trivial engine, "
        f"each offering {shape['tokens_per_s']:,.0f} tokens/s in groups of {shape['group_size']}, lengths lognormal "
        f"(median {shape['median_tokens']:,}, sigma {shape['sigma']}) cut at {shape['max_tokens']:,}. "
        f"{shape['groups_per_step']} groups per learner step. Each level: a warm-up, then a window of readings "
        f"once a second. The ladder stopped at {result['stopped']}; the whole run took {result['seconds']:.0f} s.", "",
        *([f"Label: {result['label']}", ""] if result["label"] else []),
        f"![bytes/s per stream against rollout replicas]({png.name})", "",
        "## What broke first", "",
    ]
    if lv is not None:
        lines.append(f"At {lv['rollouts']} rollout replicas"
                     + (f" (kept {lv['kept_share']:.0%} of the offered tokens)" if lv.get("kept_share") is not None else "")
                     + ":")
        lines.append("")
    lines += [f"- {f}" for f in found] + [""]
    lines += _md_tables(result)
    lines += ["", __doc__.split("\n\n", 1)[1].split("\n\nNot here")[0], ""]
    out.write_text("\n".join(lines))
