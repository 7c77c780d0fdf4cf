"""What the learner writes down: one record per optimizer step, one per evaluation round.

Both are typed Structs with a fixed set of named fields; the open-ended
families of metrics (batch statistics per verifier, engine metrics, drop and
outcome totals by reason) are dicts under a name of their own rather than
loose keys. ``flat()`` gives the one-level JSON object that ``metrics.jsonl``
holds (the file format ``rlvr-actor report`` and the live view read, unchanged
from before these types existed).

Not here: computing the numbers (``rlvr.learner.watch.metrics``, ``eval_rounds``),
or reading the file back (``rlvr.cli.commands.report``).
"""

from __future__ import annotations

from typing import Any

import msgspec


class StepRecord(msgspec.Struct, frozen=True):
    step: int
    policy_version: int
    wait_s: float  # waiting for enough kept groups
    train_s: float  # the optimizer step (all micro-batches)
    publish_s: float  # weight export and announcement (0 when not a sync step)
    samples: int  # samples trained in this step
    groups: int
    samples_trained: int  # run total
    batch: dict[str, float] = {}  # rlvr.learner.watch.metrics.batch_metrics: reward, length, staleness
    engine: dict[str, float] = {}  # the engine's metrics: loss, grad_norm, lr, clip fraction...
    totals: dict[str, float] = {}  # run totals: drops by reason, verifier outcomes, zero-variance share

    def flat(self) -> dict[str, float | int]:
        # The engine's own step counter would clash with ours.
        engine = {("engine_step" if k == "step" else k): v for k, v in self.engine.items()}
        fixed = {f: getattr(self, f) for f in self.__struct_fields__ if f not in ("batch", "engine", "totals")}
        return {**self.batch, **engine, **self.totals, **fixed}


class EvalResult(msgspec.Struct, frozen=True):
    eval_round: int
    label: str  # "before", "step<N>" or "after"
    prompts: int  # held-out prompts whose group completed
    missing: int  # prompts whose group did not complete within the round's timeout
    policy_version_min: int
    policy_version_max: int
    pass_at: dict[int, float] = {}  # k -> unbiased pass@k
    mean_correct_fraction: float | None = None
    seconds: float = 0.0
    step: int = 0  # the learner step the round ran after
    finished_at: float = 0.0  # unix time the round ended (0: a checkpoint from before the field)

    def flat(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            f: getattr(self, f) for f in self.__struct_fields__ if f not in ("pass_at", "mean_correct_fraction")
        }
        out.update({f"pass_at_{k}": v for k, v in sorted(self.pass_at.items())})
        if self.mean_correct_fraction is not None:
            out["mean_correct_fraction"] = self.mean_correct_fraction
        return out


def eval_summary(rounds: list[EvalResult], gain_points: float, started_unix: float) -> dict[str, Any]:
    """The learner summary's evaluation part: pass@1 of the "before" and the last "after" round, every
    round flat, and, with a "before" round to gain against, ``time_to_gain`` (``first_gain``) with the
    seconds from ``started_unix``, the learner's start (``up`` adds the seconds from its own)."""
    before = next((e for e in rounds if e.label == "before"), None)
    after = next((e for e in reversed(rounds) if e.label == "after"), None)
    flat = [e.flat() for e in rounds]
    out: dict[str, Any] = {"pass_at_1_before": before.pass_at.get(1) if before else None,
                           "pass_at_1_after": after.pass_at.get(1) if after else None, "evals": flat}
    if before is not None:
        gain = first_gain(flat, gain_points)
        if gain is not None and gain["finished_at"]:
            gain["learner_seconds"] = round(gain["finished_at"] - started_unix, 1)
        out["time_to_gain"] = gain
    return out


def first_gain(evals: list[dict[str, Any]], points: float) -> dict[str, Any] | None:
    """The first eval round (flat records, in order) whose pass@1 is at least
    ``points`` above the "before" round's: its label, step, pass@1, gain and
    ``finished_at``; None before it happens (or without a "before" round)."""
    before = next((e.get("pass_at_1") for e in evals if e.get("label") == "before"), None)
    if not isinstance(before, (int, float)):
        return None
    for e in evals:
        p1 = e.get("pass_at_1")
        if e.get("label") != "before" and isinstance(p1, (int, float)) and p1 - before >= points - 1e-12:
            return {"points": points, "label": e.get("label"), "step": e.get("step"), "pass_at_1": p1,
                    "gain": round(p1 - before, 4), "finished_at": e.get("finished_at") or None}
    return None


__all__ = ["EvalResult", "StepRecord", "eval_summary", "first_gain"]
