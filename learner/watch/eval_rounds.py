"""Evaluation rounds: held-out prompts, n completions each, pass@k.

The learner publishes a round's tasks with ``purpose = "eval"`` (they never
reach the optimizer), collects their scored groups as they complete, and
reports pass@k for every configured k (unbiased estimator). A round that
does not complete within its timeout reports on the groups it has and says
how many were missing. It also keeps ``keep_completions`` of its completions
(whole groups, in arrival order) with their prompts and verdicts
(``EvalRound.kept``), which the learner writes to ``<run_dir>/evals/``.
"""

from __future__ import annotations

import statistics
import time

import anyio

from rlvr.actors.bus import Bus
from rlvr.learner.config import EvalConfig
from rlvr.learner.data.datasets import TaskSpec
from rlvr.learner.data.feeder import publish_task
from rlvr.learner.custody.groups import Group
from rlvr.learner.watch.passk import mean_pass_at_k
from rlvr.learner.watch.records import EvalResult
from rlvr.protocol import SamplingParams


class EvalRound:
    def __init__(self, round_id: int, label: str, task_ids: set[str], n: int, ks: tuple[int, ...],
                 keep: int = 0) -> None:
        self.round_id = round_id
        self.keep = keep
        self.kept: list[dict] = []  # completions with their verdicts, at most `keep`
        self.label = label
        self.expected = set(task_ids)
        self.n = n
        self.ks = ks
        self.correct: dict[str, int] = {}
        self.versions: list[int] = []
        self.complete = anyio.Event()

    def add(self, group: Group) -> None:
        if group.group_id not in self.expected or group.group_id in self.correct:
            return
        self.correct[group.group_id] = sum(
            1 for _, sc in group.members if sc.verdict.components.get("accuracy", sc.verdict.reward) > 0
        )
        self.versions += [sc.sample.policy_version for _, sc in group.members]
        for _, sc in group.members[: max(0, self.keep - len(self.kept))]:
            self.kept.append(completion_record(sc))
        if len(self.correct) == len(self.expected):
            self.complete.set()

    def result(self, *, seconds: float, step: int) -> EvalResult:
        counts = list(self.correct.values())
        return EvalResult(
            eval_round=self.round_id,
            label=self.label,
            prompts=len(counts),
            missing=len(self.expected) - len(counts),
            policy_version_min=min(self.versions, default=0),
            policy_version_max=max(self.versions, default=0),
            pass_at={k: mean_pass_at_k(counts, self.n, k) for k in self.ks if k <= self.n},
            mean_correct_fraction=statistics.fmean(c / self.n for c in counts) if counts else None,
            seconds=seconds,
            step=step,
            finished_at=time.time(),
        )


def completion_record(sc) -> dict:
    """A completion as a reader wants it: the prompt, the text, and how it was judged."""
    s, v = sc.sample, sc.verdict
    prompt = s.prompt if isinstance(s.prompt, str) or s.prompt is None else [[m.role, m.content] for m in s.prompt]
    return {"sample_id": s.sample_id, "dataset": s.dataset, "index": s.index, "policy_version": s.policy_version,
            "prompt": prompt, "completion": s.text, "finish_reason": s.finish_reason, "reward": v.reward,
            "outcome": v.outcome, "verifier": v.verifier, "extracted": v.extracted, "detail": v.detail,
            "components": v.components}


class Evaluator:
    def __init__(self, bus: Bus, heldout: list[TaskSpec], cfg: EvalConfig, sampling: SamplingParams) -> None:
        self.bus = bus
        self.prompts = heldout[: cfg.prompts]
        self.cfg = cfg
        self.sampling = SamplingParams(
            temperature=cfg.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            max_tokens=sampling.max_tokens,
            stop=sampling.stop,
        )
        self.current: EvalRound | None = None
        self.last_kept: list[dict] = []  # the completions the last round kept

    @property
    def enabled(self) -> bool:
        return bool(self.prompts)

    def task_id(self, round_id: int, i: int) -> str:
        return f"{self.bus.names.run}-eval{round_id}-{i}"

    def add(self, group: Group) -> None:
        if self.current is not None:
            self.current.add(group)

    async def run_round(self, round_id: int, label: str, policy_version: int, timeout_s: float, step: int) -> EvalResult:
        ids = {self.task_id(round_id, i) for i in range(len(self.prompts))}
        self.current = EvalRound(round_id, label, ids, self.cfg.n, self.cfg.ks, keep=self.cfg.keep_completions)
        started = time.monotonic()
        for i, spec in enumerate(self.prompts):
            task = spec.to_task(
                run=self.bus.names.run, task_id=self.task_id(round_id, i), n=self.cfg.n, sampling=self.sampling,
                policy_version=policy_version, purpose="eval",
            )
            await publish_task(self.bus, task)
        with anyio.move_on_after(timeout_s):
            await self.current.complete.wait()
        result = self.current.result(seconds=time.monotonic() - started, step=step)
        self.last_kept = self.current.kept
        self.current = None
        return result
