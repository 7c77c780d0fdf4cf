"""Run totals of what the complete training groups carried, trained or dropped alike.

A step's own metrics (``batch_metrics``) see only the samples it trained; an
episode the environment failed or the rollout cut, or a group dropped for zero
variance, never reaches one. ``RunTally`` counts every complete training group
the learner filters:

- episode end reasons (``done``, ``max_turns``, ``token_budget``, ``env_error``,
  ``env_timeout``, ``template_rewrite``, ``prompt_cap``...), tool errors by tool,
  and the turns whose chat template rewrote an earlier one;
- the zero-variance share: of the groups, those whose usable rewards were all
  equal (``FilterResult.flat``), whether dynamic sampling dropped them or,
  turned off, let them train (its drops alone once read 0% for a run in which
  every group was flat);
- the pass rate by verifier over the run: the share of samples whose verdict is
  a real judgement (``groups.judged``: no failed verification, no failed or cut
  episode) with a positive ``accuracy`` (or reward), the same rule as a step's
  ``pass_rate_<verifier>``. The summary's "pass rate by verifier" is this one,
  not the last step's.

``flat()`` gives them as ``run_<name>`` keys for step and progress records;
``summary()`` as the learner summary's sections. Counted since this learner
process started: not checkpointed (a resumed run counts from its restart).
Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter

from rlvr.learner.custody.groups import judged
from rlvr.protocol import Scored


class RunTally:
    def __init__(self) -> None:
        self.ends: Counter[str] = Counter()  # episodes by end reason
        self.tool_errors: Counter[str] = Counter()  # by tool name ("unparsed": a call that was not one)
        self.template_rewrites = 0  # turns whose chat template rewrote an earlier turn
        self.judged: Counter[str] = Counter()  # samples with a real verdict, by verifier
        self.passed: Counter[str] = Counter()  # ... of which passed
        self.groups = 0  # complete training groups
        self.flat_groups = 0  # ... whose usable rewards were all equal

    def group(self, members: list[Scored], flat: bool = False) -> None:
        """Count one complete training group's samples (``flat``: its ``FilterResult.flat``)."""
        self.groups += 1
        self.flat_groups += flat
        for sc in members:
            e = sc.sample.episode
            if e is not None:
                self.ends[e.end_reason] += 1
                self.tool_errors.update(e.tool_errors)
                self.template_rewrites += e.template_rewrites
            if judged(sc):
                name = sc.verdict.verifier or sc.sample.verifier.name
                self.judged[name] += 1
                self.passed[name] += sc.verdict.components.get("accuracy", sc.verdict.reward) > 0

    def pass_rate(self) -> dict[str, float]:
        """Verifier -> its pass rate over the run (verifiers with at least one real verdict)."""
        return {v: self.passed[v] / n for v, n in sorted(self.judged.items()) if n}

    def zero_variance_share(self) -> float:
        """Of the complete training groups, the share whose usable rewards were all equal (0 before any)."""
        return self.flat_groups / self.groups if self.groups else 0.0

    def flat(self) -> dict[str, float]:
        """``run_episode_end_<reason>``, ``run_tool_errors_<tool>``, ``run_template_rewrites`` and
        ``run_pass_rate_<verifier>``: what a step or progress record carries."""
        out: dict[str, float] = {f"run_episode_end_{k}": float(v) for k, v in sorted(self.ends.items())}
        out.update({f"run_tool_errors_{k}": float(v) for k, v in sorted(self.tool_errors.items())})
        if self.ends:
            out["run_template_rewrites"] = float(self.template_rewrites)
        out.update({f"run_pass_rate_{k}": v for k, v in self.pass_rate().items()})
        return out

    def summary(self) -> dict:
        """The learner summary's sections: ``pass_rate``, and, for a run of episodes,
        ``episode_ends``, ``tool_errors`` and ``template_rewrites``."""
        out: dict = {"pass_rate": self.pass_rate()}
        if self.ends:
            out.update(episode_ends=dict(self.ends.most_common()), tool_errors=dict(self.tool_errors.most_common()),
                       template_rewrites=self.template_rewrites)
        return out


__all__ = ["RunTally"]
