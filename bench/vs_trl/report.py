"""From runs to figures: each framework's time to +10 and +20 points, pass@1 at fixed wall times,
throughput, the learner's share, peak RSS, the ratio rlvr-actor / TRL and how close each gets to the limit.

A run is a dict with ``framework``, ``wall_s``, ``curve`` (``[{"t", "step", "pass_at_1"}]``, the
evaluated snapshots in time order), ``train_s``, ``samples_generated``, ``samples_trained``,
``tokens_generated``, ``tokens_trained`` and ``peak_rss_mib``. Times count from the framework's launch
(process start-up, model load and everything after it), so start-up is part of what is compared.
"""

from __future__ import annotations

import statistics

FRAMEWORKS = ("rlvr-actor", "trl")


def time_to_gain(curve: list[dict], base: float, points: float) -> float | None:
    """Seconds after the launch at which held-out pass@1 first reached ``base + points`` (None: never)."""
    for c in curve:
        if c["pass_at_1"] >= base + points / 100:
            return c["t"]
    return None


def pass_at(curve: list[dict], base: float, t: float) -> float:
    """pass@1 of the newest snapshot saved by ``t`` seconds (the base before the first)."""
    seen = [c["pass_at_1"] for c in curve if c["t"] <= t]
    return seen[-1] if seen else base


def figures(run: dict, base: float, fixed_times: list[float], limit_tokens_per_s: float | None) -> dict:
    wall = run["wall_s"]
    out = {
        "time_to_plus10_s": time_to_gain(run["curve"], base, 10),
        "time_to_plus20_s": time_to_gain(run["curve"], base, 20),
        **{f"pass_at_1_at_{int(t)}s": round(pass_at(run["curve"], base, t), 4) for t in fixed_times},
        "best_pass_at_1": round(max([base, *(c["pass_at_1"] for c in run["curve"])]), 4),
        "steps": run["steps"],
        "samples_generated_per_s": round(run["samples_generated"] / wall, 1),
        "samples_trained_per_s": round(run["samples_trained"] / wall, 1),
        "tokens_generated_per_s": round(run["tokens_generated"] / wall, 1),
        "tokens_trained_per_s": round(run["tokens_trained"] / wall, 1),
        "learner_share": round(run["train_s"] / wall, 3),
        "tokens_trained_per_learner_s": round(run["tokens_trained"] / run["train_s"], 1) if run["train_s"] else None,
        "peak_rss_mib": run["peak_rss_mib"],
    }
    if limit_tokens_per_s:
        out["of_limit_overall"] = round(out["tokens_trained_per_s"] / limit_tokens_per_s, 3)
        if out["tokens_trained_per_learner_s"]:
            out["of_limit_while_training"] = round(out["tokens_trained_per_learner_s"] / limit_tokens_per_s, 3)
    return out


def median_figures(rows: list[dict]) -> dict:
    """Per key, the median over repeats (None when any repeat never got there: a time to a gain not
    reached in the budget is not a number, and the median of the rest would flatter it)."""
    out = {}
    for k in rows[0]:
        vals = [r.get(k) for r in rows]
        out[k] = None if any(v is None for v in vals) else round(statistics.median(vals), 4)
    return out


def ratios(rlvr: dict, trl: dict) -> dict:
    """rlvr-actor / TRL for each figure both have (for times, below 1 means rlvr-actor is faster)."""
    return {k: round(rlvr[k] / trl[k], 3) for k in rlvr
            if isinstance(rlvr.get(k), (int, float)) and isinstance(trl.get(k), (int, float)) and trl[k]}


def markdown(meta: dict, settings: list, differences: list, per_run: list[dict], med: dict, ratio: dict,
             limit: dict | None) -> str:
    keys = list(next(iter(med.values())).keys())
    lines = [
        "# rlvr-actor against TRL's GRPOTrainer, side by side",
        "",
        f"Command: `{meta['command']}`  ",
        f"Date: {meta['date']}; model: {meta['model']}; budget {meta['budget_s']} s per run; "
        f"{meta['repeats']} interleaved repeat(s); {meta['threads']} threads for each framework.  ",
        f"Machine: {meta['machine']}. Load average (1 min) before each run: {meta['loads_before']}; "
        f"{meta['shared_note']}  ",
        f"Versions: {meta['versions']}.  ",
        f"Held-out evaluation: pass@1 over {meta['eval_prompts']} held-out prompts x {meta['eval_n']} samples at "
        f"T={meta['temperature']:g}, one function (bench/vs_trl/evaluate.py) on each saved snapshot; "
        f"the shared cold-start checkpoint scores **{meta['base_pass_at_1']:.4f}**.",
        "",
        "## Settings",
        "",
        "| setting | rlvr-actor | TRL |",
        "| --- | --- | --- |",
        *[f"| {a} | {b} | {c} |" for a, b, c in settings],
        "",
        "Set differently, and why:",
        "",
        "| | rlvr-actor | TRL |",
        "| --- | --- | --- |",
        *[f"| {a} | {b} | {c} |" for a, b, c in differences],
        "",
        "## Results (median over repeats; ratio = rlvr-actor / TRL)",
        "",
        "| figure | rlvr-actor | TRL | ratio |",
        "| --- | --- | --- | --- |",
        *[f"| {k} | {_fmt(med['rlvr-actor'].get(k))} | {_fmt(med['trl'].get(k))} | {_fmt(ratio.get(k))} |"
          for k in keys],
        "",
        "Times are seconds from the framework's launch (start-up and model load included); `—` is not "
        "reached within the budget. `learner_share` is the time in the optimizer step (rlvr-actor: the step "
        "records' `train_s`; TRL: `training_step` less generation and scoring) over the wall time. "
        "`of_limit_*`: trained tokens per second over the tight forward+backward loop's.",
        "",
    ]
    if limit:
        lines += ["## The limit", "",
                  f"A tight forward + backward + AdamW loop of {limit['rows']} rows x ({limit['prompt_len']} prompt + "
                  f"{limit['completion_len']} completion) tokens, the fastest of 1..N threads: {limit['threads']} "
                  f"(median step s by threads: {limit.get('step_s_median_by_threads')}) "
                  f"(bench/vs_trl/limit.py): {limit['step_s_median']} s per step (median), "
                  f"**{limit['tokens_trained_per_s']} completion tokens/s**, {limit['samples_per_s']} samples/s.", ""]
    lines += _breakdown_lines(per_run)
    lines += ["## Each run", "", "| repeat | framework | " + " | ".join(keys) + " |",
              "| --- | --- | " + " | ".join("---" for _ in keys) + " |"]
    lines += [f"| {r['repeat']} | {r['framework']} | " + " | ".join(_fmt(r['figures'].get(k)) for k in keys) + " |"
              for r in per_run]
    return "\n".join(lines) + "\n"


def _breakdown_lines(per_run: list[dict]) -> list[str]:
    """Where each rlvr-actor run's wall time went (bench/vs_trl/profile.py), and each process's CPU seconds."""
    rows = [r for r in per_run if r.get("breakdown")]
    if not rows:
        return []
    keys = list(rows[0]["breakdown"])
    lines = ["## Where rlvr-actor's time goes", "",
             "Start-up is launch to the first step's start (model load, roles, bus); `train`, `wait`, `publish` "
             "are the step records' sums; `other` is the rest of the wall time. CPU seconds per process from "
             "bench/vs_trl/watch.py.", "",
             "| repeat | " + " | ".join(keys) + " | CPU s by process |",
             "| --- | " + " | ".join("---" for _ in keys) + " | --- |"]
    for r in rows:
        cpu = ", ".join(f"{k} {v:g}" for k, v in (r.get("cpu_s_by_process") or {}).items())
        lines.append(f"| {r['repeat']} | " + " | ".join(_fmt(r["breakdown"][k]) for k in keys) + f" | {cpu} |")
    return lines + [""]


def _fmt(v) -> str:
    if v is None:
        return "—"
    return f"{v:g}" if isinstance(v, float) else str(v)
