"""The stages scenario's checks after its final ``up`` (stages_scenario.py says what they are)."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from bench.chaos.invariants import check_custody, read_committed
from bench.chaos.stages_scenario import read_json as _read

if TYPE_CHECKING:
    from bench.chaos.stages_scenario import Runner

SKIPPED = ("rejected", "too_short", "too_long", "truncated", "language_mixing", "duplicate", "over_per_prompt")


def check_run(r: Runner, faults: list[dict]) -> tuple[dict, list[str]]:
    """summary.json and stages.json, the chain, every RL and sampling part's custody."""
    v: list[str] = []
    summary, record = _read(r.run_dir / "summary.json"), _read(r.run_dir / "stages.json")
    stages = summary.get("stages", [])
    if summary.get("exit_code") != 0 or [s.get("status") for s in stages] != ["done"] * len(r.names):
        v.append(f"summary.json: exit_code {summary.get('exit_code')}, stages "
                 f"{[(s.get('name'), s.get('status')) for s in stages]}")
    if [s.get("attempts") for s in record.get("stages", [])] != [s.get("attempts") for s in stages]:
        v.append("stages.json and summary.json disagree on the attempts")
    want = Counter(f["stage"] for f in faults if f.get("hit"))
    attempts = [s.get("attempts") for s in stages]
    if attempts != [1 + want[n] for n in r.names]:
        v.append(f"attempts {attempts}, expected {[1 + want[n] for n in r.names]} (1 + the kills that hit each stage)")
    model = _read(r.run_dir / "prepared.json").get("model")
    for s, conf in zip(stages, r.raw["stages"]):
        if s["model_start"] != model:
            v.append(f"{s['name']} started from {s['model_start']}, the previous stage handed on {model}")
        model = s["model_end"]
        if not model or not Path(model, "config.json").exists():
            v.append(f"{s['name']} handed on {model!r}, not a model folder")
        steps = conf.get("learn", {}).get("steps", r.raw["learn"]["steps"]) if conf["kind"] == "rl" \
            else conf.get("sft", {}).get("steps")
        if s["steps"] != steps:
            v.append(f"{s['name']}: {s['steps']} steps, configured {steps}")
        if r.raw["learn"]["eval"]["prompts"] and (s["pass_at_1_before"] is None or s["pass_at_1_after"] is None):
            v.append(f"{s['name']}: held-out pass@1 missing ({s['pass_at_1_before']}, {s['pass_at_1_after']})")
    for a, b in zip(stages, stages[1:]):
        if b["pass_at_1_before"] != a["pass_at_1_after"]:
            v.append(f"{b['name']}: pass@1 before {b['pass_at_1_before']} != {a['name']}'s after {a['pass_at_1_after']}")
    custody, parts = _custody(r, v)
    return {"custody": custody, "parts": parts, "stages": [{k: s.get(k) for k in (
        "name", "kind", "status", "attempts", "steps", "model_start", "model_end", "seconds")} for s in stages]}, v


def _custody(r: Runner, v: list[str]) -> tuple[dict, dict]:
    from bench.chaos.observe import Observer
    from rlvr.cli.natsserver import NatsServer

    total = {"published": 0, "trained": 0, "lost": [], "twice": [], "in_flight": 0, "dropped_listed": Counter(),
             "dropped_unlisted": Counter()}
    parts: dict[str, dict] = {}
    server = NatsServer(r.run_dir / "nats", log_file=r.root / "check-nats.log").start()
    try:
        for i, conf in enumerate(r.raw["stages"]):
            kind = conf["kind"]
            if kind == "sft":
                continue
            part = r.part(i, "rl" if kind == "rl" else "sample")
            obs = Observer(server.url, f"{r.run[:48]}-s{i}")
            try:
                scored = obs.read_scored()
            finally:
                obs.close()
            chk = check_custody(part, scored, final=False)
            name = f"{r.names[i]}/{part.name}"
            v += [f"{name}: {x}" for x in chk.violations]
            if chk.phantom:
                v.append(f"{name}: {len(chk.phantom)} settled ids never published on SCORED, e.g. {chk.phantom[:5]}")
            parts[name] = {"published": chk.published, "trained": chk.trained, "in_flight": chk.in_flight,
                           "lost": len(chk.lost), "twice": len(chk.twice), "step": chk.step,
                           "dropped": {**chk.dropped_listed, **chk.dropped_unlisted}}
            for k in ("published", "trained"):
                total[k] += getattr(chk, k)
            # A stage ends at its step count: what was scored after its last step (above the final floor:
            # check_custody allows no unsettled id below it) is never trained by design, and is counted so.
            total["dropped_unlisted"]["after_last_step"] += chk.in_flight
            total["lost"] += [f"{name}:{s}" for s in chk.lost]
            total["twice"] += [f"{name}:{s}" for s in chk.twice]
            total["dropped_listed"].update(chk.dropped_listed)
            total["dropped_unlisted"].update(chk.dropped_unlisted)
            per = conf.get("prompts_per_batch") or r.raw["learn"]["groups_per_step"]
            g = conf.get("n") if kind == "rejection_sft" else r.raw["learn"]["group_size"]
            steps = math.ceil(conf["prompts"] / per) if kind == "rejection_sft" else \
                conf.get("learn", {}).get("steps", r.raw["learn"]["steps"])
            if chk.step != steps or chk.trained != steps * per * g:
                v.append(f"{name}: step {chk.step} and {chk.trained} samples trained, expected {steps} and "
                         f"{steps * per * g} (every step full)")
            if kind == "rejection_sft":
                dropped = sum(chk.dropped_listed.values()) + sum(chk.dropped_unlisted.values())
                v += _check_rejection(part, steps, per, g, conf, name, dropped)
    finally:
        server.stop()
    total["dropped_listed"], total["dropped_unlisted"] = dict(total["dropped_listed"]), dict(total["dropped_unlisted"])
    return total, parts


def _check_rejection(sample: Path, steps: int, per: int, n: int, conf: dict, name: str, dropped: int) -> list[str]:
    """The dumps against the committed ledger, and kept_counts.json against the dumps and the ledger's drops."""
    v: list[str] = []
    ledger = Counter(sid for e in read_committed(sample).entries for sid in e.trained)
    records = []
    for step in range(1, steps + 1):
        p = sample / "samples" / f"step-{step:06d}.jsonl"
        records += [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []
    dumped = Counter(rec["sample_id"] for rec in records)
    twice = [s for s, c in dumped.items() if c > 1]
    if twice:
        v.append(f"{name}: {len(twice)} samples dumped in two steps, e.g. {twice[:5]}")
    if set(dumped) != set(ledger):
        v.append(f"{name}: the dumps and the committed ledger differ: {len(set(dumped) - set(ledger))} dumped only, "
                 f"{len(set(ledger) - set(dumped))} trained only")
    groups = Counter(rec["group_id"] for rec in records)
    if len(groups) != steps * per or set(groups.values()) != {n}:
        v.append(f"{name}: {len(groups)} groups dumped (expected {steps * per}), sizes {sorted(set(groups.values()))}")
    counts = _read(sample.parent / "kept_counts.json")
    kept = (sample.parent / "kept.jsonl").read_text().splitlines() if (sample.parent / "kept.jsonl").exists() else []
    if counts.get("sampled") != len(records) or counts.get("sampled") != steps * per * n:
        v.append(f"{name}: kept_counts sampled {counts.get('sampled')}, {len(records)} dumped, "
                 f"{steps * per * n} expected")
    if counts.get("kept", -1) + sum(counts.get(k, 0) for k in SKIPPED) != counts.get("sampled") or \
            counts.get("kept") != len(kept) or not kept:
        v.append(f"{name}: kept_counts {counts} do not sum to sampled, or kept.jsonl holds {len(kept)}")
    if counts.get("dropped_before_the_filters") != dropped:
        v.append(f"{name}: kept_counts says {counts.get('dropped_before_the_filters')} dropped before the filters, "
                 f"the sampler's ledger and drop counts {dropped} (copies of a dumped sample are no drop)")
    per_prompt = Counter(json.loads(x)["source"]["index"] for x in kept)
    if per_prompt and max(per_prompt.values()) > conf["filters"]["max_per_prompt"]:
        v.append(f"{name}: a prompt kept {max(per_prompt.values())} times, over filters.max_per_prompt")
    return v
