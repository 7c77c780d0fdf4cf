"""``rlvr-actor doctor``: the run for real, briefly, on this machine's resources; one verdict.

``plan``'s start-up checks first; then the config's preparation step (``up``'s, its SFT warm-up
capped at ``--warmup-steps`` and the model kept for the next doctor: ``rlvr.cli.doctor.warmup``), its rollout
engine, verifier pool and DeepSpeed learner on a few groups (``rlvr.cli.doctor.session``):
log-prob agreement between the engine and the learner before and after a training step, the
verifier's outcome mix with examples, zero-variance groups, tokens/s per part and the forecast
wall time of the configured run (``verdict``). Prints a report and writes it as JSON. Exit codes:
0 go, 1 something to fix first (named), 2 a config that does not load.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from rlvr.actors.error_text import error_text
from rlvr.cli.doctor.warmup import DEFAULT_WARMUP_STEPS

DESCRIPTION = ("A short live check of a config: generate a few groups with its engine, score them with its "
               "verifier, train a step, and report log-prob agreement (sampled-token difference, KL, top-k "
               "overlap; what differs between the two sides, such as the dtype, is named), the verifier's "
               "outcome mix, zero-variance groups, tokens/s and the forecast wall time; one verdict: go, or "
               "what to fix first.")


class Args(msgspec.Struct, frozen=True, kw_only=True):
    config: str | None = None
    set: list[str] = []
    minutes: float = 3.0
    groups: int = 8
    steps: int = 1
    positions: int = 256
    inject: str = ""
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    report: str | None = None
    run_dir: str | None = None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML config (default: the built-in example)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one config key, as for `up`")
    p.add_argument("--minutes", type=float, default=3.0, help="deadline of the live part, after the preparation (default 3)")
    p.add_argument("--groups", type=int, default=8, help="groups to generate and score (default 8: with fewer "
                   "samples than 64, flat rewards are a warning)")
    p.add_argument("--steps", type=int, default=1, help="training steps before the second agreement check (default 1)")
    p.add_argument("--positions", type=int, default=256, help="sampled positions compared (default 256)")
    p.add_argument("--inject", default="", help='show a mismatch on purpose: "temperature=0.7" (rollout side only) '
                                                'or "no-reload" (the trained weights never reach the rollout)')
    p.add_argument("--warmup-steps", type=int, default=DEFAULT_WARMUP_STEPS,
                   help=f"cap the preparation's SFT warm-up at this many steps, for the doctor only (default "
                        f"{DEFAULT_WARMUP_STEPS}; 0: the "
                        "config's own warm-up); the prepared model is kept under <up.runs_dir>/doctor-prepared/ for "
                        "the next doctor on the same config")
    p.add_argument("--report", help="where to write the JSON report (default: <run dir>/doctor.json)")
    p.add_argument("--run-dir", help="keep the throwaway run here (default: a temporary folder, removed)")


def run(args: Args) -> int:
    from rlvr.cli.commands.up import builtin_config_path, parse_sets
    from rlvr.cli.run_config import ConfigError, load_config

    if args.inject and not (args.inject == "no-reload" or args.inject.startswith("temperature=")):
        print(f"rlvr-actor doctor: --inject {args.inject!r}: expected temperature=X or no-reload", file=sys.stderr)
        return 2
    if args.minutes <= 0:
        print(f"rlvr-actor doctor: --minutes {args.minutes:g}: expected a positive number", file=sys.stderr)
        return 2
    if args.warmup_steps < 0:
        print(f"rlvr-actor doctor: --warmup-steps {args.warmup_steps}: expected 0 (the config's warm-up) or more",
              file=sys.stderr)
        return 2
    path = args.config or builtin_config_path()
    try:
        cfg = load_config(path, overrides=parse_sets(args.set))
    except ConfigError as e:
        print(f"rlvr-actor doctor: {e}", file=sys.stderr)
        return 2
    started = time.monotonic()
    run_dir = Path(args.run_dir) if args.run_dir else Path(tempfile.mkdtemp(prefix=f"doctor-{cfg.run}-"))
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    report_path = Path(args.report) if args.report else run_dir / "doctor.json"
    try:
        return _doctor(cfg, path, args, run_dir, report_path, started)
    finally:
        if not args.run_dir:
            if not args.report:  # the report lived in the throwaway folder: keep it beside the config's runs
                kept = Path(cfg.up.runs_dir) / f"doctor-{cfg.run}.json"
                if report_path.exists():
                    kept.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(report_path, kept)
                    print(f"report: {kept}")
            shutil.rmtree(run_dir, ignore_errors=True)


def _doctor(cfg, path, args: Args, run_dir: Path, report_path: Path, started: float) -> int:
    from rlvr.cli.doctor.session import run_session
    from rlvr.cli.doctor.warmup import prepare
    from rlvr.cli.doctor.verdict import Verdict, decide, forecast
    from rlvr.cli.plan.checks import run_checks

    def say(text: str) -> None:
        print(f"[doctor] {text}", flush=True)

    findings, _, _ = run_checks(cfg)
    failed = [f"{f.key}: {f.message}" for f in findings if not f.ok]
    if failed:
        verdict = Verdict(False, f"start-up check failed: {failed[0]}", [f"start-up check failed: {f}" for f in failed], [])
        _write(report_path, {"config": str(path), "verdict": msgspec.to_builtins(verdict)})
        _print(verdict, None, None)
        return 1
    say("start-up checks passed (rlvr-actor plan for the whole list)")
    try:
        cfg, prep = prepare(cfg, Path(cfg.up.runs_dir), args.warmup_steps, say)
        if prep is not None:
            say(f"model ready: {prep.line()}")
        result = run_session(cfg, groups=args.groups, steps=args.steps, positions=args.positions, inject=args.inject,
                             deadline_s=args.minutes * 60, say=say)
    except TimeoutError:
        verdict = Verdict(False, f"the live check did not finish within {args.minutes:g} minutes (--minutes, after the "
                          "preparation): "
                          "generation, scoring or the learner hangs or is far slower than the run can afford", [], [])
        _write(report_path, {"config": str(path), "verdict": msgspec.to_builtins(verdict)})
        _print(verdict, None, None)
        return 1
    except Exception as e:  # noqa: BLE001 - the preparation, an engine or the learner failed: that is the finding
        verdict = Verdict(False, f"the run fails at start: {error_text(e)}", [], [])
        _write(report_path, {"config": str(path), "verdict": msgspec.to_builtins(verdict)})
        _print(verdict, None, None)
        return 1
    verdict = decide(cfg, result, [], prep)
    fc = forecast(cfg, result)
    _write(report_path, {"config": str(path), "seconds": round(time.monotonic() - started, 1),
                         "preparation": None if prep is None else {**msgspec.to_builtins(prep), "capped": prep.capped},
                         "result": msgspec.to_builtins(result), "forecast": msgspec.to_builtins(fc),
                         "verdict": msgspec.to_builtins(verdict)})
    _print(verdict, result, fc, prep)
    say(f"report written to {report_path} ({time.monotonic() - started:.0f} s)")
    return 0 if verdict.go else 1


def _write(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))


def _print(verdict, result, fc, prep=None) -> None:
    from rlvr.cli.doctor.session import _line

    if prep is not None:
        print(f"# preparation: {prep.line()}")
    if result is not None:
        dtypes = f", rollout {result.rollout_dtype}, learner {result.learner_dtype}" if result.learner_dtype else ""
        print(f"# log-prob agreement (rollout engine vs learner, same tokens{dtypes})")
        print(f"   version 0: {_line(result.agreement_before)}")
        if result.steps_trained:
            print(f"   after {result.steps_trained} step(s), weights {'reloaded' if result.reloaded else 'NOT reloaded'}: "
                  f"{_line(result.agreement_after)}")
        print(f"# verifier: {result.samples} samples, outcomes " +
              ", ".join(f"{k} {v}" for k, v in sorted(result.outcomes.items())))
        for ex in result.examples:
            print(f"   {ex.outcome:>13} reward {ex.reward:+.2f}: {ex.completion!r}" + (f" ({ex.detail})" if ex.detail else ""))
        print(f"# zero-variance groups at the start: {result.zero_variance_groups} of {result.groups}")
    if fc is not None:
        lt = f"{fc.learn_tokens_per_s:,.0f}" if fc.learn_tokens_per_s else "n/a"
        print(f"# speed: rollout {fc.rollout_tokens_per_s:,.0f} tokens/s, verifier {fc.verify_samples_per_s:,.0f} "
              f"samples/s, learner {lt} tokens/s, weight reload {fc.reload_s:.2f} s")
        print("   per step: " + ", ".join(f"{k} {v:.1f} s" for k, v in fc.where_the_time_goes.items()))
        print(f"   forecast: {fc.step_s:.1f} s per step x {fc.steps} steps = {fc.wall_s / 60:.1f} min "
              f"(estimate: {fc.assumptions})")
    for w in verdict.warnings:
        print(f"warn {w}")
    for p in verdict.problems[1:]:
        print(f"also {p}")
    print(f"verdict: {'GO' if verdict.go else 'FIX FIRST: ' + verdict.first_fix}")
