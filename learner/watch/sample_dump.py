"""What the learner trained, written for a person to read: ``<out_dir>/samples/step-<N>.jsonl``.

After each optimizer step (every ``[learn.samples] every_steps``) the learner
writes one JSON object per trained sample, as verl's rollout dump does: its
prompt and token ids, the completion's ids, loss mask and behaviour log-probs,
its policy versions, text and finish reason, the episode (turns, end reason,
tools, turn rewards, info, transcript), the verdict, and the outcome advantage
the trainer gave it. ``rlvr-actor samples RUN_DIR`` (cli/commands/samples.py)
shows them; docs/samples.md explains how to read them.

Everything the learner trained is in the record: an agent's episode of several
segments (``Episode.segments``, each trained as a sequence of its own:
learner/train/batching.py ``sample_items``) keeps the Sample's own segment in
the record's ``prompt_ids``/``completion_ids``/``mask``/``logprobs`` and every
other one in ``episode.segments``, with its own prompt ids, completion, mask,
log-probs and turns, so the tokens of a step's records are the learner's
``tokens`` for that step. Token ids only: no text is decoded here (no
tokenizer in a dry learner, and none on the step's path); the reader decodes.

The advantage is the group-normalised outcome advantage, computed again here
with the registered estimator the trainer uses (``[learn.engine.advantage]``;
a dry learner, which trains nothing, records GRPO's). Per-token process
advantages (``advantage.process``) are not recorded.

A step replayed after a restart from a checkpoint writes its file again (the
later one wins, as in metrics.jsonl). A write that fails (a full disk) is
logged once and never stops training. Not covered: eval rounds (their
completions go to ``<out_dir>/evals/``, learner/watch/eval_rounds.py) and dropped
samples (``metrics.jsonl`` counts them by reason).
"""

from __future__ import annotations

import math
import os
import threading
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from rlvr.actors.logs import get_logger
from rlvr.protocol import Scored

if TYPE_CHECKING:
    from rlvr.learner.algos.config import AdvantageConfig
    from rlvr.learner.config import SamplesConfig

log = get_logger("rlvr.learner")

SAMPLES_DIR = "samples"


def step_file(out_dir: Path, step: int) -> Path:
    return Path(out_dir) / SAMPLES_DIR / f"step-{step:06d}.jsonl"


def group_advantages(groups: list[list[Scored]], cfg: AdvantageConfig | None) -> tuple[list[list[float]], str]:
    """Each sample's outcome advantage within its group, and the estimator's name.

    With ``cfg`` (a learner with an engine) the registered estimator the trainer calls
    (learner/algos/advantages.py, on the same float32 rewards as learner/train/steps.py); without
    (a dry learner: no torch) GRPO in plain Python, ``(r - mean) / (std + 1e-6)``."""
    if cfg is None:
        return [_grpo([sc.verdict.reward for sc in g]) for g in groups], "grpo"
    if cfg.name == "gae":  # PPO's critic credits each token inside the step: no per-sample advantage
        return [[None] * len(g) for g in groups], "gae"
    import torch

    from rlvr.learner.algos.advantages import compute_advantages

    out = []
    for g in groups:
        rewards = torch.tensor([sc.verdict.reward for sc in g], dtype=torch.float32)  # [G]
        out.append(compute_advantages(rewards, cfg).tolist())
    return out, cfg.name


def _grpo(rewards: list[float], eps: float = 1e-6) -> list[float]:
    n = len(rewards)
    mean = sum(rewards) / n if n else 0.0
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1)) if n > 1 else 0.0  # Bessel, as grpo()
    return [(r - mean) / (std + eps) for r in rewards]


def sample_record(step: int, sc: Scored, advantage: float | None, estimator: str) -> dict[str, Any]:
    """One trained sample as plain JSON: what ``rlvr-actor samples`` reads."""
    s, v, c = sc.sample, sc.verdict, sc.sample.completion
    prompt: Any = s.prompt
    if isinstance(prompt, list):
        prompt = [{"role": m.role, "content": m.content} for m in prompt]
    return {
        "step": step,
        "sample_id": s.sample_id,
        "group_id": s.group_id,
        "task_id": s.task_id,
        "sample_index": s.sample_index,
        "dataset": s.dataset,
        "index": s.index,
        "prompt": prompt,
        "prompt_ids": s.prompt_ids,
        "completion_ids": c.ids,
        # Written out in full: 1 where the policy wrote the token (trained on), 0 where the environment did.
        "mask": list(c.mask) if c.mask else [1] * len(c.ids),
        "logprobs": c.logprobs,
        "policy_version": s.policy_version,
        "policy_version_max": s.policy_version_max,
        "text": s.text,
        "finish_reason": s.finish_reason,
        "replica": s.replica,
        "episode": _episode(s.episode) if s.episode is not None else None,
        "verdict": {
            "reward": v.reward, "outcome": v.outcome, "verifier": v.verifier, "components": v.components,
            "answer": v.extracted, "detail": v.detail,
        },
        "advantage": advantage,
        "advantage_estimator": estimator,
    }


def _turns(turns) -> list[dict[str, int]]:
    return [{"start": t.start, "end": t.end, "policy_version": t.policy_version} for t in turns]


def _segment(g) -> dict[str, Any]:
    """One more sequence of an agent's episode, named as the record's own fields are."""
    c = g.completion
    return {"prompt_ids": g.prompt_ids, "completion_ids": c.ids, "mask": list(c.mask) if c.mask else [1] * len(c.ids),
            "logprobs": c.logprobs, "turns": _turns(g.turns)}


def _episode(e) -> dict[str, Any]:
    return {
        "environment": e.environment,
        "turns": _turns(e.turns),  # the Sample's own segment's
        "end_reason": e.end_reason,
        "detail": e.detail,
        "turn_rewards": e.turn_rewards,
        "env_reward": e.env_reward,
        "tool_calls": e.tool_calls,
        "tool_errors": e.tool_errors,
        "info": e.info,
        "transcript": e.transcript,
        "env_s": e.env_s,
        "template_rewrites": e.template_rewrites,
        # An agent's other conversations, in the order they started; the record's own ids are its last model turn's.
        "segments": [_segment(g) for g in e.segments],
        "agent": e.agent,  # the prompt ids are the agent's request, not the task's prompt rendered
    }


def write_step(out_dir: Path, step: int, groups: list[list[Scored]], advantage: AdvantageConfig | None) -> Path:
    """Write one step's trained samples to ``step_file(out_dir, step)``, replaced whole; its path."""
    advantages, estimator = group_advantages(groups, advantage)
    path = step_file(out_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "wb") as f:
        for group, advs in zip(groups, advantages):
            for sc, a in zip(group, advs):
                f.write(msgspec.json.encode(sample_record(step, sc, a, estimator)) + b"\n")
    os.replace(tmp, path)  # a reader never sees half a step
    return path


class SampleDump:
    """The learner's writer of ``samples/step-<N>.jsonl``: on a thread of its own, off the step's path,
    and never a fault.

    ``write`` only hands the step to the writer thread and returns: the optimizer never waits for the
    dump (it cost the built-in example's steps ~10% when the step awaited it, docs/benchmarks.md). If
    the writer falls ``MAX_PENDING`` steps behind (a slow disk), the oldest step waiting is skipped and
    counted (``skipped``, in the summary) rather than holding training or memory: the dump is a record
    for people, so it is sampled under pressure, never a brake. ``close`` writes what is waiting."""

    MAX_PENDING = 4

    def __init__(self, out_dir: Path, cfg: SamplesConfig, advantage: AdvantageConfig | None) -> None:
        self.out_dir = Path(out_dir)
        self.cfg = cfg
        self.advantage = advantage
        self.failures = 0
        self.skipped = 0
        self._pending: deque[tuple[int, list[list[Scored]]]] = deque()
        self._cv = threading.Condition()
        self._closed = False
        self._busy = False
        self._thread: threading.Thread | None = None

    async def write(self, step: int, groups: list[list[Scored]]) -> None:
        if not (self.cfg.dump and step % self.cfg.every_steps == 0):
            return
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="sample-dump", daemon=True)
                self._thread.start()
            if len(self._pending) >= self.MAX_PENDING:
                dropped, _ = self._pending.popleft()
                self.skipped += 1
                if self.skipped == 1:  # once: a slow disk would say it every step
                    log.warning("samples_dump_skipped", step=dropped, waiting=self.MAX_PENDING,
                                note="the dump's writer is behind; steps are skipped, training never waits")
            self._pending.append((step, groups))
            self._cv.notify()

    async def close(self, timeout_s: float = 60.0) -> None:
        """Write what is waiting (at most ``timeout_s``), then stop the thread."""
        await anyio.to_thread.run_sync(self._drain, timeout_s)

    def _drain(self, timeout_s: float) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
            self._cv.wait_for(lambda: not self._pending and not self._busy, timeout=timeout_s)

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._pending or self._closed)
                if not self._pending:
                    return
                step, groups = self._pending.popleft()
                self._busy = True
            try:
                self._write(step, groups)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _write(self, step: int, groups: list[list[Scored]]) -> None:
        try:
            write_step(self.out_dir, step, groups, self.advantage)
        except Exception as e:  # noqa: BLE001 - a record for people: losing it must not stop training
            self.failures += 1
            if self.failures == 1:  # once: a full disk would say it every step
                log.warning("samples_dump_failed", step=step, error=f"{type(e).__name__}: {e}",
                            note="training goes on; later failures are not logged")


__all__ = ["SAMPLES_DIR", "SampleDump", "group_advantages", "sample_record", "step_file", "write_step"]
