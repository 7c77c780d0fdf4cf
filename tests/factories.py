"""Builders of valid wire messages for tests."""

from __future__ import annotations

import time

from rlvr.protocol import (Completion, Sample, SampleGroup, SamplingParams, Scored, ScoredGroup, Task, Verdict,
                           VerifierSpec)


def make_task(run: str = "t", k: int = 0, prompt: str = "2+3=", gold: str = "5", n: int = 4, **kw) -> Task:
    return Task(
        run=run, task_id=f"{run}-t{k}", dataset="arithmetic", index=k, prompt=prompt,
        verifier=VerifierSpec("exact", {"gold": gold}), n=n, sampling=SamplingParams(max_tokens=8),
        policy_version=0, created_at=time.time(), **kw,
    )


def make_sample(run: str = "t", k: int = 0, i: int = 0, text: str = "5", gold: str = "5", n: int = 4,
                verifier: VerifierSpec | None = None, version: int = 0, **kw) -> Sample:
    return Sample(
        run=run, task_id=f"{run}-t{k}", sample_index=i, group_id=f"{run}-t{k}", group_size=n,
        prompt_ids=[1, 2, 3], completion=Completion(ids=[5, 6], logprobs=[-0.1, -0.2]), text=text,
        finish_reason="stop", policy_version=version, policy_version_max=version,
        verifier=verifier or VerifierSpec("exact", {"gold": gold}), sampling=SamplingParams(max_tokens=8),
        replica="test", **kw,
    )


def make_scored(run: str = "t", k: int = 0, i: int = 0, reward: float = 1.0, n: int = 4, version: int = 0,
                outcome: str = "ok") -> Scored:
    sample = make_sample(run, k, i, n=n, version=version)
    return Scored(sample=sample, verdict=Verdict(reward, outcome, "exact", {"accuracy": reward}))  # type: ignore[arg-type]


def make_group(run: str = "t", k: int = 0, n: int = 1, **kw) -> SampleGroup:
    """Task ``k``'s whole group as ROLLOUTS carries it: ``n`` samples (``make_sample``'s keywords), in order."""
    return SampleGroup(run, f"{run}-t{k}", [make_sample(run, k, i, n=n, **kw) for i in range(n)])


def make_scored_group(run: str = "t", k: int = 0, rewards: list[float] | None = None, version: int = 0,
                      outcome: str = "ok", replica: str = "") -> ScoredGroup:
    """Task ``k``'s group as SCORED carries it: one sample per reward (default one, rewarded 1.0)."""
    rewards = [1.0] if rewards is None else rewards
    n = len(rewards)
    samples = [make_sample(run, k, i, n=n, version=version) for i in range(n)]
    verdicts = [Verdict(r, outcome, "exact", {"accuracy": r}) for r in rewards]  # type: ignore[arg-type]
    return ScoredGroup(run, f"{run}-t{k}", samples, verdicts, replica)


def scored_messages(scored: list[Scored]) -> list[ScoredGroup]:
    """``scored`` as SCORED carries it: one ScoredGroup per task, in the order the tasks first come,
    each task's members in the order given (a test that wants them out of order says so)."""
    by_task: dict[str, list[Scored]] = {}
    for sc in scored:
        by_task.setdefault(sc.sample.task_id, []).append(sc)
    return [ScoredGroup(m[0].sample.run, task_id, [sc.sample for sc in m], [sc.verdict for sc in m], m[0].replica)
            for task_id, m in by_task.items()]
