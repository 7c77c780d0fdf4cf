"""Per-step metrics: one JSON object per line in ``metrics.jsonl``, mirrored to
TensorBoard when it is installed, to the experiment trackers that are configured
(W&B, MLflow: ``rlvr.learner.watch.sinks``), and attached to the step's span."""

from __future__ import annotations

import json
import os
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.actors.logs import get_logger
from rlvr.learner.watch.step_alarms import foreign_script_share
from rlvr.protocol import Scored

if TYPE_CHECKING:
    from rlvr.learner.config import TrackersConfig
    from rlvr.learner.watch.sinks import Trackers

log = get_logger("rlvr.learner.metrics")


class MetricsWriter:
    def __init__(self, out_dir: Path, trackers: TrackersConfig | None = None, *, run_name: str = "",
                 resolved_config: bytes = b"") -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.path = out_dir / "metrics.jsonl"
        self._f = open(self.path, "a", buffering=1)  # noqa: SIM115 (lives with the learner)
        self._trackers: Trackers | None = None
        if trackers is not None and (trackers.wandb is not None or trackers.mlflow is not None):
            from rlvr.learner.watch.sinks import Trackers  # its threads import wandb / mlflow, only when configured

            self._trackers = Trackers(trackers, out_dir=out_dir, run_name=run_name, resolved_config=resolved_config)
        self.write_failures: Counter[str] = Counter()  # by sink: metrics.jsonl, tensorboard
        self._tb = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(out_dir / "tensorboard"))
        except Exception:  # tensorboard not installed: JSONL only
            self._tb = None

    def write(self, record: dict[str, Any]) -> None:
        self._write_notices()
        self._write(record)

    def samples(self, step: int, groups: list[list[Scored]]) -> None:
        """A step's samples, for the trackers' sample tables (metrics.jsonl keeps none)."""
        if self._trackers is not None:
            self._trackers.samples(step, groups)

    def close(self) -> None:
        if self._trackers is not None:
            self._trackers.close()
            self._write_notices()  # a tracker that failed while finishing says so too
        for close in (self._f.close, self._tb.close if self._tb is not None else None):
            try:
                if close is not None:
                    close()
            except OSError as e:  # the last buffered line on a full disk
                self._failed("close", e, "the last lines may be lost")

    def _write(self, record: dict[str, Any]) -> None:
        try:
            self._f.write(json.dumps(record, default=float) + "\n")
        except OSError as e:  # a full disk: the line is lost, counted, and the next one is tried
            self._failed("metrics.jsonl", e, "the lines are lost; each step tries again")
        if self._tb is not None and "step" in record:
            try:
                for k, v in record.items():
                    if isinstance(v, (int, float)) and k != "step":
                        self._tb.add_scalar(k, v, record["step"])
            except Exception as e:  # noqa: BLE001 - its writer thread died (a full disk) and re-raises forever
                self._tb = None  # not closed: its close would raise the same
                self._failed("tensorboard", e, "TensorBoard is off until the learner restarts")
        if self._trackers is not None:
            self._trackers.record(record)

    def _failed(self, what: str, e: BaseException, then: str) -> None:
        """A record for people: losing it must not stop training (the checkpoint is what must not fail).
        Said once per sink: a full disk would say it every step."""
        self.write_failures[what] += 1
        if self.write_failures[what] == 1:
            log.warning("metrics_write_failed", sink=what, error=f"{type(e).__name__}: {e}",
                        note=f"training goes on; {then}; later failures are counted, not logged")

    def _write_notices(self) -> None:
        """The alarm record of each tracker turned off since the last write (written
        here, by the learner's thread: the file has one writer)."""
        while self._trackers is not None and not self._trackers.notices.empty():
            self._write(self._trackers.notices.get())


def write_json_atomic(path: Path, data: Any) -> None:
    """``data`` as JSON at ``path``, replaced whole (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=float))
    os.replace(tmp, path)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """``rows`` as JSON lines at ``path``, replaced whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        for row in rows:
            f.write(json.dumps(row, default=float) + "\n")
    os.replace(tmp, path)


def episode_metrics(samples: list[Scored]) -> dict[str, float]:
    """Turns, segments (an agent's conversations), tools (calls and errors by tool), environment
    time, end reasons, template rewrites and the masked share of a batch's multi-turn episodes (none when the batch has
    no episode). Only the trained ones: the run's totals over every episode, dropped ones
    too, are ``run_*`` (``rlvr.learner.watch.tally``)."""
    episodes = [s.sample for s in samples if s.sample.episode is not None]
    if not episodes:
        return {}
    # Every completion the step trained: an agent's segments other than the Sample's own are trained too.
    completions = [c for s in episodes for c in (s.completion, *(g.completion for g in s.episode.segments))]
    out: dict[str, float] = {
        "episode_turns_mean": statistics.fmean(s.episode.turn_count for s in episodes),  # all segments' turns
        "episode_env_s_mean": statistics.fmean(s.episode.env_s for s in episodes),
        "episode_env_reward_mean": statistics.fmean(s.episode.env_reward for s in episodes),
        "masked_token_share": sum(len(c.ids) - c.policy_tokens() for c in completions)
        / max(1, sum(len(c.ids) for c in completions)),
    }
    for reason, n in Counter(s.episode.end_reason for s in episodes).items():
        out[f"episode_end_{reason}"] = float(n)
    # Conversations per episode trained as sequences: an agent that edits or compacts its history, or runs
    # sub-agents, has several (Episode.segments); 1 for every other episode.
    segments = [s.episode.segment_count for s in episodes]
    out["episode_segments_mean"] = statistics.fmean(segments)
    out["episode_segments_max"] = float(max(segments))
    # Turns whose chat template rewrote an earlier one (kept or ended: on_template_rewrite).
    out["episode_template_rewrites"] = float(sum(s.episode.template_rewrites for s in episodes))
    calls: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for s in episodes:
        calls.update(s.episode.tool_calls)
        errors.update(s.episode.tool_errors)
    for tool, n in calls.items():
        out[f"tool_calls_{tool}"] = float(n)
    for tool, n in errors.items():
        out[f"tool_errors_{tool}"] = float(n)
    return out


def batch_metrics(groups: list[list[Scored]], current_version: int, scripts: tuple[str, ...] = ("LATIN",)
                  ) -> dict[str, float]:
    """Reward, pass rate, length, staleness and script statistics of one step's batch."""
    samples = [s for g in groups for s in g]
    if not samples:
        return {}
    rewards = [s.verdict.reward for s in samples]
    lengths = [s.sample.completion.policy_tokens() for s in samples]  # the policy's tokens, not the environment's
    by_verifier: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        acc = s.verdict.components.get("accuracy", s.verdict.reward)
        by_verifier[s.verdict.verifier].append(1.0 if acc > 0 else 0.0)
    staleness = Counter(current_version - s.sample.policy_version for s in samples)
    out: dict[str, float] = {
        "reward_mean": statistics.fmean(rewards),
        "reward_std": statistics.pstdev(rewards),
        "group_reward_std_mean": statistics.fmean(statistics.pstdev([s.verdict.reward for s in g]) for g in groups),
        "response_len_mean": statistics.fmean(lengths),
        "response_len_max": float(max(lengths)),
        "response_clip_ratio": sum(s.sample.finish_reason == "length" for s in samples) / len(samples),
        "staleness_mean": statistics.fmean(current_version - s.sample.policy_version for s in samples),
        "staleness_max": float(max(staleness)),
    }
    for v, hits in by_verifier.items():
        out[f"pass_rate_{v}"] = statistics.fmean(hits)
    out.update(episode_metrics(samples))
    out["foreign_script_share"] = foreign_script_share([s.sample.text for s in samples], scripts)
    with_steps = [s.verdict.steps for s in samples if s.verdict.steps]
    if with_steps:  # a step verifier's: how many steps, and how many hold
        out["steps_per_sample"] = statistics.fmean(len(st) for st in with_steps)
        out["steps_right_share"] = statistics.fmean(sum(x.ok for x in st) / len(st) for st in with_steps)
    for lag, count in sorted(staleness.items()):
        out[f"staleness_hist_{lag}"] = float(count)
    return out
