"""Pacing: how many tasks the feeder keeps in flight, and when a step may go with fewer groups.

Dynamic sampling drops the groups whose rewards do not vary, so a step of ``groups_per_step`` kept
groups needs more groups generated than it trains. With a fixed number of tasks in flight
(``inflight_limit``: B x max_staleness), each step found only part of its batch ready and waited
for another round of generation: on the built-in example 0.2-0.3 s of a 0.6 s step
(docs/benchmarks.md, "The dynamic-sampling wait"). Two remedies, each a key of ``[learn]``:

- ``oversample = true`` (DAPO's own): the tasks in flight follow the observed share of groups
  kept, ``inflight_limit / kept share`` (an average over the last ``window`` groups, at most
  ``MAX_OVERSAMPLE`` times the limit), so about a batch of kept groups is ready when a step ends.
  The extra groups are generated under the same weights; one a step does not take waits for the
  next, where ``max_staleness`` still bounds its lag (a stale one is dropped and counted).
- ``min_groups_per_step = k``: a step goes with fewer than ``groups_per_step`` kept groups, at least
  ``k``, when no other complete group is waiting: the optimizer never idles while a batch fills.
  The loss is a mean over the step's tokens, so a smaller step is a noisier step, not a larger one.

And one that refills nothing: ``dynamic_sampling_refill = false``. A step goes once
``groups_per_step`` complete groups went through the filters since the last step, with the ones kept
(at least one): the feeder's pace is that of dynamic sampling off, and the learner spends no forward
or backward on groups whose advantages are all 0, nor counts their tokens in the token mean.

Pure: no bus, no clock. ``learner/actor.py`` asks it at each group and each step.
"""

from __future__ import annotations

from collections import deque

MAX_OVERSAMPLE = 4.0  # tasks in flight never exceed this many times the configured limit


class Pacing:
    def __init__(self, inflight_limit: int, groups_per_step: int, *, oversample: bool = False,
                 min_groups_per_step: int = 0, refill: bool = True, window: int = 64) -> None:
        self.base = inflight_limit
        self.groups_per_step = groups_per_step
        self.oversample = oversample
        self.min_groups = min(min_groups_per_step, groups_per_step) if min_groups_per_step else groups_per_step
        self.refill = refill
        self._kept: deque[bool] = deque(maxlen=window)
        self._filtered_since_step = 0

    @classmethod
    def for_run(cls, cfg) -> Pacing:
        """The pacing ``[learn]`` asks for (a ``LearnConfig``); refill only matters with dynamic sampling on."""
        return cls(cfg.inflight_limit, cfg.groups_per_step, oversample=cfg.oversample,
                   min_groups_per_step=cfg.min_groups_per_step,
                   refill=cfg.dynamic_sampling_refill or not cfg.dynamic_sampling)

    def filtered(self, kept: bool) -> None:
        """One complete training group went through the filters."""
        self._kept.append(kept)
        self._filtered_since_step += 1

    def stepped(self) -> None:
        """A step took its batch."""
        self._filtered_since_step = 0

    def kept_share(self) -> float | None:
        """The share of recent groups kept (None until a few were seen)."""
        if len(self._kept) < 8:
            return None
        return sum(self._kept) / len(self._kept)

    def inflight(self) -> int:
        """The tasks the feeder may keep outstanding now."""
        share = self.kept_share()
        if not self.oversample or share is None:
            return self.base
        factor = min(MAX_OVERSAMPLE, 1.0 / max(share, 1.0 / MAX_OVERSAMPLE))
        return max(self.base, round(self.base * factor))

    def step_now(self, kept_groups: int, waiting_groups: int) -> bool:
        """Whether a step should go with ``kept_groups`` kept so far, ``waiting_groups`` complete
        groups waiting to be filtered: a full batch always; a short one of at least
        ``min_groups_per_step`` only when nothing else is waiting. Without refill: once
        ``groups_per_step`` groups were filtered since the last step, with what they kept (at least one)."""
        if kept_groups >= self.groups_per_step:
            return True
        if not self.refill:
            return kept_groups >= 1 and self._filtered_since_step >= self.groups_per_step
        return kept_groups >= self.min_groups and waiting_groups == 0


__all__ = ["MAX_OVERSAMPLE", "Pacing"]
