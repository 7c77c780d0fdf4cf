"""The doctor's findings read together: one verdict (go, or what to fix first) and the forecast.

Order of what to fix first: a failed start-up check (``plan``'s), then log-prob disagreement
(training on it is off-policy in a way nothing corrects), then a verifier that fails (the
stage-1 alarm ``verifier_failing``'s words), then flat rewards (``flat_reward``), then
everything else as warnings. A difference between the two sides' settings (``differences``: the
dtype, a vLLM ``extra`` key) is named even when the agreement holds: as a warning then, with the
thresholds it was held to, and as a likely cause when it does not.
"""

from __future__ import annotations

import msgspec

from rlvr.cli.doctor.agreement import FP32_THRESHOLDS, thresholds_for
from rlvr.cli.doctor.differences import dtype_difference, engine_overrides, likely_causes
from rlvr.learner.watch.alarms import FAILING, AlarmConfig

# Flat rewards in fewer samples than this are a warning, not what to fix first: with none right in
# n samples the pass rate is only known to be below about 3/n (the rule of three), and a task whose
# pass rate is a few percent does learn (examples/smollm2.toml starts there).
FLAT_EVIDENCE_SAMPLES = 64


class Forecast(msgspec.Struct, frozen=True):
    rollout_tokens_per_s: float
    verify_samples_per_s: float
    learn_tokens_per_s: float | None
    reload_s: float
    step_s: float
    steps: int
    wall_s: float
    where_the_time_goes: dict[str, float]  # seconds per step by part
    assumptions: str


class Verdict(msgspec.Struct, frozen=True):
    go: bool
    first_fix: str
    problems: list[str]
    warnings: list[str]


def forecast(cfg, result) -> Forecast:
    t = result.timing
    n = cfg.learn.groups_per_step * cfg.learn.group_size
    kept = 1 - result.zero_variance_groups / max(1, result.groups) if cfg.learn.dynamic_sampling else 1.0
    gen_factor = 1 / max(kept, 1 / 16)  # groups generated per group trained (dynamic sampling refills)
    rollout_tps = t.rollout_tokens / t.rollout_s if t.rollout_s else 0.0
    verify_sps = t.verified / t.verify_s if t.verify_s else 0.0
    learn_tps = t.learn_tokens / t.learn_s if t.learn_s else None
    per_sample_tokens = result.mean_prompt_tokens + result.mean_completion_tokens
    parts = {
        "rollout": n * gen_factor * result.mean_completion_tokens / rollout_tps if rollout_tps else 0.0,
        "verify": n * gen_factor / verify_sps if verify_sps else 0.0,
        "learn": n * per_sample_tokens / learn_tps if learn_tps else 0.0,
        "reload": t.reload_s / cfg.learn.sync_every,
    }
    overlapped = cfg.learn.max_staleness >= 1
    step = (max(parts["rollout"], parts["verify"], parts["learn"] + parts["reload"]) if overlapped
            else sum(parts.values()))
    return Forecast(
        rollout_tokens_per_s=rollout_tps, verify_samples_per_s=verify_sps, learn_tokens_per_s=learn_tps,
        reload_s=t.reload_s, step_s=step, steps=cfg.learn.steps, wall_s=step * cfg.learn.steps,
        where_the_time_goes=parts,
        assumptions=(f"{n} samples per step, {kept:.0%} of groups kept (measured here), the rates measured in this "
                     f"session on this machine, {'rollout ahead of the learner (max_staleness >= 1)' if overlapped else 'parts in turn'}"
                     "; evaluation rounds, checkpoints and the bus not counted"),
    )


def decide(cfg, result, failed_checks: list[str], prep=None) -> Verdict:
    """``prep``: the doctor's ``warmup.Preparation`` (None: nothing was prepared). A warm-up the doctor
    capped below its target makes flat rewards a warning: they are the capped model's, not the run's."""
    problems, warnings = [], []
    capped = prep is not None and prep.capped
    problems += [f"start-up check failed: {c}" for c in failed_checks]
    e = cfg.learn.engine
    dtype = None if e is None else dtype_difference(result.rollout_dtype, result.learner_dtype,
                                                    str(getattr(cfg.rollout.engine, "dtype", "")), e.bf16)
    overrides = engine_overrides(cfg.rollout.engine)
    for label, a in (("at version 0", result.agreement_before), ("after the training step", result.agreement_after)):
        if a is not None and a.flagged:
            causes = likely_causes(
                rollout_temperature=_rollout_temperature(cfg, result), learner_temperature=e.temperature,
                top_p=cfg.learn.sampling.top_p, top_k=cfg.learn.sampling.top_k, dtype=dtype, overrides=overrides,
                before_ok=None if result.agreement_before is None or a is result.agreement_before
                else not result.agreement_before.flagged,
                reloaded=result.reloaded)
            problems.append(f"log-prob disagreement {label} ({'; '.join(a.reasons)}); likely: {causes[0]}"
                            + (f" (also: {'; '.join(causes[1:])})" if len(causes) > 1 else ""))
            break
    else:  # the agreement held (or was not measured): what differs is still said
        if dtype is not None:
            th = thresholds_for(result.rollout_dtype, result.learner_dtype)
            measured = result.agreement_before is not None or result.agreement_after is not None
            warnings.append(f"{dtype}: the agreement was held to the 16-bit (bf16) thresholds ({th.text()}; fp32's: "
                            f"{FP32_THRESHOLDS.text()}) and "
                            + ("is within them" if measured else "was not measured (no sampled tokens)")
                            + "; the rounding stays in every importance ratio: one dtype on both sides removes it")
        warnings += overrides
    total = sum(result.outcomes.values())
    failing = sum(result.outcomes.get(o, 0) for o in FAILING)
    alarms = AlarmConfig()
    if total and failing >= alarms.failure_share * total:
        problems.append(
            f"verifier_failing: the verifier fails on {failing} of {total} verdicts ({_mix(result.outcomes)}): "
            "parse_error means it found no answer where it looks, error that it raised or returned no usable "
            "reward, timeout that it ran past its time limit, sandbox_error that its sandbox failed (examples below)")
    elif failing:
        warnings.append(f"{failing} of {total} verdicts failed ({_mix(result.outcomes)})")
    if result.groups and result.zero_variance_groups >= alarms.flat_share * result.groups:
        flat = (f"flat_reward: {result.zero_variance_groups} of {result.groups} groups had zero reward variance, so "
                "GRPO has no signal")
        if capped:
            warnings.append(f"{flat} on the doctor's capped warm-up ({prep.sft_steps} SFT steps, greedy pass@1 "
                            f"{prep.sft_greedy_pass_at_1:.3f} of a {prep.target_pass_at_1:g} target): not the run's "
                            "model; --warmup-steps 0 checks the config's own warm-up")
        elif result.samples < FLAT_EVIDENCE_SAMPLES:
            right = result.outcomes.get("ok", 0)
            need = -(-FLAT_EVIDENCE_SAMPLES // max(1, result.samples // max(1, result.groups)))
            warnings.append(f"{flat} in only {result.samples} samples ({right} right): too few to tell a task out of "
                            f"reach from a rare success (none right in {result.samples} bounds the pass rate below "
                            f"about {3 / result.samples:.0%}); --groups {need} or more decides it")
        else:
            problems.append(f"{flat}; check the prompt asks for the format the verifier reads, and that the task is "
                            "within the model's reach")
    elif result.zero_variance_groups:
        share = result.zero_variance_groups / result.groups
        warnings.append(
            f"{result.zero_variance_groups} of {result.groups} groups had zero reward variance at the start: "
            + (f"dynamic sampling drops them, so the rollout generates ~{1 / max(1 - share, 1 / 16):.1f}x the groups "
               "it trains" if cfg.learn.dynamic_sampling else "they train with zero advantage (dynamic_sampling off)"))
    warnings += result.notes
    if capped:
        warnings.append(f"the warm-up was capped by the doctor: {prep.line()}; the outcome mix, zero-variance "
                        "groups and forecast here are of that model")
    return Verdict(go=not problems, first_fix=problems[0] if problems else "", problems=problems, warnings=warnings)


def _rollout_temperature(cfg, result) -> float:
    for note in result.notes:
        if note.startswith("injected: the rollout samples at temperature "):
            return float(note.rsplit(" ", 1)[1])
    return cfg.learn.sampling.temperature


def _mix(outcomes: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items(), key=lambda kv: -kv[1])) or "none"


__all__ = ["Forecast", "Verdict", "decide", "forecast"]
