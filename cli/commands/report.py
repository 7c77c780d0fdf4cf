"""``rlvr-actor report RUN_DIR``: plots, ``summary.json`` and a summary table
from a run's ``metrics.jsonl``.

The learner appends one JSON object per line to ``<run_dir>/metrics.jsonl``:
step records (``step``, ``reward_mean``, ``kl``, ``drop_<reason>`` ...) and
evaluation records (``"event": "eval"``, ``label``, ``pass_at_<k>``). This
module reads that file only, so it works on a finished run, a crashed one,
or one still going, and on a copy of the file taken to another machine.

- ``write_plots(run_dir)`` writes one PNG per metric into ``<run_dir>/plots``
  (matplotlib with the Agg backend, imported here and only here). A metric the
  run did not record gets a plot that says so instead of an error.
- ``summarize(run_dir)`` refreshes the keys of ``<run_dir>/summary.json`` that
  the metrics determine, keeping the rest (``engine``, ``wall_seconds`` ...).
- ``format_report(summary)`` is the compact table ``run`` prints.

A learner that restarted from a checkpoint replays the steps after it, so a
step can appear twice; the later record wins.

Not covered: TensorBoard (the learner writes its event files itself), and
anything that needs the bus or the model.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
PLOTS_DIR = "plots"


@dataclass(frozen=True)
class Plot:
    file: str
    title: str
    keys: tuple[str, ...]  # step-record keys drawn as lines, against the step
    ylabel: str
    band: str | None = None  # key of a ± band around the first line (a std)


PLOTS = (
    Plot("reward.png", "Reward", ("reward_mean",), "mean reward", band="reward_std"),
    Plot("response_length.png", "Response length", ("response_len_mean", "response_len_max"), "tokens"),
    Plot("kl.png", "KL to the reference", ("kl",), "KL"),
    Plot("entropy.png", "Entropy", ("entropy",), "nats / token"),
    Plot("staleness.png", "Staleness", ("staleness_mean", "staleness_max"), "policy versions behind"),
    Plot("zero_variance_share.png", "Zero-variance groups", ("zero_variance_share",), "share of groups"),
)
PASS_PLOT = "pass_at_1.png"


class MetricsMissingError(FileNotFoundError):
    """The run directory has no ``metrics.jsonl``."""


@dataclass(frozen=True)
class RunMetrics:
    steps: list[dict[str, Any]]  # one per step, sorted by step
    evals: list[dict[str, Any]]  # in the order they were written
    progress: list[dict[str, Any]] = ()  # type: ignore[assignment]  # "progress" records (no step came for a while)
    alarms: list[dict[str, Any]] = ()  # type: ignore[assignment]  # reward-signal alarms, as raised
    progress_after_last_step: bool = False  # the last progress record came after the last step record


def read_metrics(run_dir: Path) -> RunMetrics:
    """Parse ``metrics.jsonl``; a torn last line (a run still writing) is skipped."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise MetricsMissingError(f"{path} does not exist")
    by_step: dict[int, dict] = {}
    evals: list[dict] = []
    progress: list[dict] = []
    alarms: list[dict] = []
    after = False
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(rec, dict):
            continue
        event = rec.get("event")
        if event == "eval":
            evals.append(rec)
        elif event == "progress":
            progress.append(rec)
            after = True
        elif event == "alarm":
            alarms.append(rec)
        elif event is None and isinstance(rec.get("step"), (int, float)):
            by_step[int(rec["step"])] = rec
            after = False
    return RunMetrics([by_step[s] for s in sorted(by_step)], evals, progress, alarms, after)


def _series(records: list[dict], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in records:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            xs.append(float(r.get("step", 0)))
            ys.append(float(v))
    return xs, ys


def write_plots(run_dir: Path) -> list[Path]:
    """Write every plot into ``<run_dir>/plots``; returns the PNG paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    metrics = read_metrics(run_dir)
    out_dir = run_dir / PLOTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for plot in PLOTS:
        fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
        drawn = False
        for key in plot.keys:
            xs, ys = _series(metrics.steps, key)
            if not xs:
                continue
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=key)
            drawn = True
            if plot.band and key == plot.keys[0]:
                bx, bs = _series(metrics.steps, plot.band)
                if len(bx) == len(xs):
                    ax.fill_between(xs, [y - s for y, s in zip(ys, bs)], [y + s for y, s in zip(ys, bs)],
                                    alpha=0.2, label=f"± {plot.band}")
        _finish(ax, plot.title, plot.ylabel, drawn, " / ".join(plot.keys))
        written.append(_save(fig, plt, out_dir / plot.file))
    written.append(_pass_plot(plt, metrics.evals, out_dir / PASS_PLOT))
    return written


def _pass_plot(plt, evals: list[dict], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    ks = sorted({int(k[len("pass_at_"):]) for e in evals for k in e if k.startswith("pass_at_") and k[8:].isdigit()})
    drawn = False
    for k in ks:
        xs, ys = _series(evals, f"pass_at_{k}")
        if xs:
            ax.plot(xs, [100 * y for y in ys], marker="o", label=f"pass@{k}", linewidth=2 if k == 1 else 1)
            drawn = True
    if drawn:
        for e in evals:  # label the "before" and "after" points
            if e.get("label") in ("before", "after") and isinstance(e.get("pass_at_1"), (int, float)):
                ax.annotate(f"{e['label']} {100 * e['pass_at_1']:.1f}%", (e.get("step", 0), 100 * e["pass_at_1"]),
                            textcoords="offset points", xytext=(4, 6), fontsize=8)
        ax.set_ylim(bottom=0)
    _finish(ax, "Held-out pass@k", "% of prompts", drawn, "pass@1 (no eval records)")
    return _save(fig, plt, path)


def _finish(ax, title: str, ylabel: str, drawn: bool, what: str) -> None:
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    if drawn:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, f"{what}: not recorded", ha="center", va="center", transform=ax.transAxes, color="gray")
        ax.set_xticks([])
        ax.set_yticks([])


def _save(fig, plt, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def summarize(run_dir: Path) -> dict:
    """Refresh ``<run_dir>/summary.json`` from the metrics and return it.

    Keys set here: ``steps``, ``samples_trained``, ``pass_at_1_before``
    (eval label "before"), ``pass_at_1_after`` (the last eval labelled
    "after"), ``pass_at_k_before`` / ``pass_at_k_after`` (every k),
    ``reward_first`` / ``reward_last``, ``drops`` (samples by reason; an
    existing ``drops`` from the learner's final summary is kept),
    ``staleness_mean``, ``staleness_max``, ``zero_variance_share``,
    ``tokens_per_s_mean``, ``pass_rate`` (by verifier, over the run: the
    ``run_pass_rate_<verifier>`` totals of the last record, or the last step's
    rate for a run from before them; the learner's own end-of-run rates are
    kept), ``episode_ends`` and ``tool_errors`` (a run of episodes: every
    episode by end reason, tool errors by tool, dropped episodes too),
    ``verifier_outcomes`` (training samples by verdict outcome; the learner's
    own end-of-run count is kept like ``drops``). Every other key already in
    the file is kept.
    """
    run_dir = Path(run_dir)
    metrics = read_metrics(run_dir)
    path = run_dir / SUMMARY_FILE
    summary: dict = {}
    if path.is_file():
        try:
            summary = json.loads(path.read_text())
        except json.JSONDecodeError:
            summary = {}
    computed = _from_metrics(metrics)
    # The learner's own end-of-run counts of drops and outcomes (learner_summary.json,
    # copied here by `up`) also cover groups received after the last step; keep them.
    for key in ("drops", "verifier_outcomes", "samples", "pass_rate", "episode_ends", "tool_errors"):
        if isinstance(summary.get(key), dict) and (summary[key] or key not in ("pass_rate", "episode_ends")):
            computed.pop(key, None)
    summary.update(computed)
    path.write_text(json.dumps(summary, indent=2))
    return summary


def _from_metrics(m: RunMetrics) -> dict:
    steps, last = m.steps, (m.steps[-1] if m.steps else {})
    # Run totals (drops, outcomes, the samples' accounting) from the latest record that
    # has them: a progress record is written while no step comes (a run that drops everything).
    totals = m.progress[-1] if m.progress and (not steps or m.progress_after_last_step) else last
    before = next((e for e in m.evals if e.get("label") == "before"), {})
    after = next((e for e in reversed(m.evals) if e.get("label") == "after"), {})
    out: dict = {
        "steps": int(last.get("step", 0)),
        "samples_trained": int(last["samples_trained"]) if "samples_trained" in last
        else int(sum(r.get("samples", 0) for r in steps)),
        "pass_at_1_before": before.get("pass_at_1"),
        "pass_at_1_after": after.get("pass_at_1"),
        "pass_at_k_before": _pass_at(before),
        "pass_at_k_after": _pass_at(after),
        "reward_first": steps[0].get("reward_mean") if steps else None,
        "reward_last": last.get("reward_mean"),
        # drop_<reason> in a step record is the run's running total of samples.
        "drops": {k[len("drop_"):]: int(v) for k, v in totals.items() if k.startswith("drop_") and v},
        "zero_variance_share": last.get("zero_variance_share"),
        # run_pass_rate_<verifier>: the run's rate over every real verdict (learner/watch/tally.py); a run
        # from before it has only the last step's pass_rate_<verifier>.
        "pass_rate": _by_prefix(totals, "run_pass_rate_", float)
        or {k[len("pass_rate_"):]: v for k, v in last.items() if k.startswith("pass_rate_")},
        # outcome_<name> in a step record is the run's running total of training samples.
        "verifier_outcomes": {k[len("outcome_"):]: int(v) for k, v in totals.items() if k.startswith("outcome_")},
    }
    if ends := _by_prefix(totals, "run_episode_end_", int):  # a run of episodes: every end, dropped ones too
        out["episode_ends"] = ends
        out["tool_errors"] = _by_prefix(totals, "run_tool_errors_", int)
    if "scored" in totals:
        out["samples"] = {k: int(totals[k]) for k in ("scored", "trained", "dropped", "in_flight", "copies") if k in totals}
    for key, name, fn in (("staleness_mean", "staleness_mean", statistics.fmean),
                          ("staleness_max", "staleness_max", max),
                          ("tokens_per_s", "tokens_per_s_mean", statistics.fmean),
                          ("train_s", "train_s_mean", statistics.fmean),
                          ("wait_s", "wait_s_mean", statistics.fmean)):
        _, ys = _series(steps, key)
        out[name] = round(fn(ys), 4) if ys else None
    return out


def _by_prefix(rec: dict, prefix: str, cast) -> dict:
    return {k[len(prefix):]: cast(v) for k, v in sorted(rec.items()) if k.startswith(prefix)}


def _pass_at(e: dict) -> dict:
    return {k[len("pass_at_"):]: v for k, v in e.items() if k.startswith("pass_at_") and k[8:].isdigit()}


def format_report(s: dict) -> str:
    """The compact table ``rlvr-actor report`` prints."""

    def pct(x) -> str:
        return "n/a" if not isinstance(x, (int, float)) else f"{100 * x:.1f}%"

    def num(x, fmt: str = "{:.3f}") -> str:
        return "n/a" if not isinstance(x, (int, float)) else fmt.format(x)

    before, after = s.get("pass_at_1_before"), s.get("pass_at_1_after")
    both = isinstance(before, (int, float)) and isinstance(after, (int, float))
    delta = f"  ({100 * (after - before):+.1f} points)" if both else ""
    ks = sorted(set(s.get("pass_at_k_before") or {}) | set(s.get("pass_at_k_after") or {}), key=int)
    passk = "  ".join(f"pass@{k} {pct((s.get('pass_at_k_before') or {}).get(k))} -> "
                      f"{pct((s.get('pass_at_k_after') or {}).get(k))}" for k in ks if k != "1")
    rows = [
        ("pass@1 before -> after", f"{pct(before)} -> {pct(after)}{delta}"),
        ("pass@k", passk or "n/a"),
        ("reward first -> last", f"{num(s.get('reward_first'))} -> {num(s.get('reward_last'))}"),
        ("pass rate by verifier",
         ", ".join(f"{k}={pct(v)}" for k, v in sorted((s.get("pass_rate") or {}).items())) or "n/a"),
        *_episode_rows(s),
        ("verifier outcomes",
         ", ".join(f"{k}={v}" for k, v in (s.get("verifier_outcomes") or {}).items()) or "n/a"),
        ("steps / samples trained", f"{s.get('steps', 'n/a')} / {s.get('samples_trained', 'n/a')}"),
        ("samples scored", _accounting(s.get("samples"))),
        ("drops (samples)", ", ".join(f"{k}={v}" for k, v in sorted((s.get("drops") or {}).items()) if v)
         or ("none" if s.get("samples") else "n/a")),
        ("zero-variance share", pct(s.get("zero_variance_share"))),
        ("staleness mean / max", f"{num(s.get('staleness_mean'), '{:.2f}')} / {num(s.get('staleness_max'), '{:.0f}')}"),
        ("throughput", f"{num(s.get('tokens_per_s_mean'), '{:.0f}')} tokens/s (learner, mean)"),
        ("step time",
         f"wait {num(s.get('wait_s_mean'), '{:.2f}')}s, train {num(s.get('train_s_mean'), '{:.2f}')}s (mean)"),
    ]
    rows.append(("time to gain", _gain(s)))
    if s.get("alarm_counts"):
        held = s.get("alarm_seconds") or {}
        rows.append(("alarms raised", ", ".join(
            f"{k}={v}" + (f" (held {held[k]:.0f} s)" if isinstance(held.get(k), (int, float)) else "")
            for k, v in sorted(s["alarm_counts"].items()))))
    for key, label in (("engine", "engine"), ("wall_seconds", "wall seconds")):
        if key in s:
            rows.append((label, str(s[key])))
    rows += [("ALARM", alarm) for alarm in s.get("alarms") or []]
    killed = [r for r, c in (s.get("role_exit_codes") or {}).items() if isinstance(c, int) and c < 0]
    if killed:
        rows.append(("killed at the stop", ", ".join(killed)))
    if isinstance(s.get("failure"), dict):  # the learner stopped a run that cannot learn
        f = s["failure"]
        rows += [("STOPPED", str(f.get("what", ""))), ("first failure", f"{f.get('kind')} from {f.get('source')}: "
                                                                         f"{f.get('line', '')}"),
                 ("how to fix it", str(f.get("fix", "")))]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def _episode_rows(s: dict) -> list[tuple[str, str]]:
    """A run of episodes: how its episodes ended, and its tools' errors (none for single completions)."""
    ends = s.get("episode_ends") or {}
    if not ends:
        return []
    rows = [("episode ends", ", ".join(f"{k}={v}" for k, v in sorted(ends.items(), key=lambda kv: -kv[1])))]
    errors = s.get("tool_errors") or {}
    rows.append(("tool errors", ", ".join(f"{k}={v}" for k, v in sorted(errors.items())) or "none"))
    if isinstance(s.get("template_rewrites"), int):
        rows.append(("template rewrites", str(s["template_rewrites"])))
    return rows


def _gain(s: dict) -> str:
    """When held-out pass@1 first rose by ``[learn.eval] gain_points`` (``time_to_gain``)."""
    if "time_to_gain" not in s:
        return "n/a (no held-out round before training)"
    g = s["time_to_gain"]
    if not g:
        return "not reached"
    secs = g.get("up_seconds", g.get("learner_seconds"))
    since = "from `up`" if "up_seconds" in g else "from the learner's start"
    when = f", {secs:.0f} s {since}" if isinstance(secs, (int, float)) else ""
    return f"+{100 * g['gain']:.1f} points (>= {100 * g['points']:.0f}) at eval {g['label']}, step {g['step']}{when}"


def _accounting(samples: dict | None) -> str:
    if not samples:
        return "n/a"
    return (f"{samples.get('scored', 0)}: trained {samples.get('trained', 0)}, dropped {samples.get('dropped', 0)}, "
            f"in flight {samples.get('in_flight', 0)}")


DESCRIPTION = "Regenerate plots and summary.json from a run's metrics.jsonl."


class Args(msgspec.Struct, frozen=True, kw_only=True):
    run_dir: str


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="the run directory (holding metrics.jsonl)")


def run(args: Args) -> int:
    """``rlvr-actor report RUN_DIR``: 0 on success, 2 when there are no metrics."""
    path = Path(args.run_dir)
    try:
        summary = summarize(path)
        plots = write_plots(path)
    except MetricsMissingError as e:
        print(f"rlvr-actor report: {e}", file=sys.stderr)
        return 2
    print(f"run {path.resolve()}")
    print(format_report(summary))
    print(f"plots ({len(plots)}) in {path.resolve() / PLOTS_DIR}: " + ", ".join(p.name for p in plots))
    print(f"summary: {path.resolve() / SUMMARY_FILE}")
    return 0


__all__ = ["PLOTS", "MetricsMissingError", "RunMetrics", "format_report", "read_metrics", "run",
           "summarize", "write_plots"]
