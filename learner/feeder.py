"""The feeder: publishes tasks, at most ``max_inflight`` outstanding.

Bounding the tasks in flight bounds staleness at the source (AReaL's η): a
sample can only be as old as the batches that fit in the window. A task is
outstanding from its publication until its group completes or is dropped.

Task ids are ``<run>-t<k>`` for the k-th training task, and the k-th task is
a pure function of (seed, k): after a crash the learner resumes at the
checkpointed ``k``, republishes the same tasks, and JetStream's duplicate
window drops the copies that were already issued.

The curriculum is optional: ``by_level`` walks the dataset's levels in order
of difficulty; ``pass_rate`` prefers prompts whose rolling pass rate is
neither 0 nor 1 (where GRPO has signal).
"""

from __future__ import annotations

import random
import time
from collections import defaultdict, deque

import anyio

from rlvr.actors.bus import Bus
from rlvr.actors.logs import get_logger
from rlvr.actors.tracing import tracer
from rlvr.learner.datasets import TaskSpec
from rlvr.protocol import SamplingParams, Task

log = get_logger("rlvr.feeder")


class Feeder:
    def __init__(
        self,
        bus: Bus,
        train: list[TaskSpec],
        *,
        group_size: int,
        sampling: SamplingParams,
        max_inflight: int,
        seed: int,
        issued: int = 0,
        curriculum: str = "none",
    ) -> None:
        if not train:
            raise ValueError("the feeder has no training tasks")
        self.bus = bus
        self.train = train
        self.group_size = group_size
        self.sampling = sampling
        self.max_inflight = max_inflight
        self.seed = seed
        self.issued = issued
        self.curriculum = curriculum
        self.outstanding: set[str] = set()
        self.policy_version = 0
        self.paused = False
        self._changed = anyio.Event()
        self.pass_rate: dict[int, deque[float]] = defaultdict(lambda: deque(maxlen=16))
        self._epoch = -1
        self._order: list[int] = []

    def spec_for(self, k: int) -> TaskSpec:
        """The k-th training task: a fresh seeded permutation per epoch."""
        epoch, offset = divmod(k, len(self.train))
        if self._epoch != epoch:
            order = list(range(len(self.train)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            if self.curriculum == "by_level":
                order.sort(key=lambda i: self.train[i].level or 0)  # stable: shuffled within a level
            self._epoch, self._order = epoch, order
        return self.train[self._order[offset]]

    def task_id(self, k: int) -> str:
        return f"{self.bus.names.run}-t{k}"

    def done(self, task_id: str, rewards: list[float] | None = None, index: int | None = None) -> None:
        """A group completed or was dropped: its slot frees up."""
        self.outstanding.discard(task_id)
        if rewards and index is not None:
            self.pass_rate[index].append(sum(r > 0 for r in rewards) / len(rewards))
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def run(self) -> None:
        while True:
            while self.paused or len(self.outstanding) >= self.max_inflight:
                await self._changed.wait()
            await self.publish_one()

    async def publish_one(self) -> Task:
        k = self.issued
        spec = self.spec_for(k)
        if self.curriculum == "pass_rate":
            spec = self._prefer_informative(k, spec)
        task = Task(
            run=self.bus.names.run,
            task_id=self.task_id(k),
            dataset=spec.dataset,
            index=spec.index,
            prompt=spec.prompt,
            verifier=spec.verifier,
            n=self.group_size,
            sampling=self.sampling,
            policy_version=self.policy_version,
            created_at=time.time(),
            level=spec.level,
        )
        await publish_task(self.bus, task)
        self.outstanding.add(task.task_id)
        self.issued = k + 1
        return task

    def _prefer_informative(self, k: int, spec: TaskSpec) -> TaskSpec:
        # Skip a prompt the policy always or never solves, at most 3 tries.
        # Pass rates are not checkpointed: after a crash a replayed k may pick
        # another prompt; its id is the same, so JetStream keeps the first.
        for j in range(3):
            history = self.pass_rate.get(spec.index)
            if not history or 0.0 < sum(history) / len(history) < 1.0:
                return spec
            spec = self.spec_for(k + (j + 1) * 7919)
        return spec


async def publish_task(bus: Bus, task: Task) -> None:
    """Open the task's trace and publish it (the trace's root span)."""
    with tracer().start_as_current_span(
        "feeder.task",
        attributes={
            "rlvr.task_id": task.task_id,
            "rlvr.purpose": task.purpose,
            "rlvr.policy_version": task.policy_version,
        },
    ):
        await bus.publish(bus.names.tasks, task, msg_id=task.task_id)
