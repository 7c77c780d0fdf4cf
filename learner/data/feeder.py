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

A transient bus fault never ends the learner here: a publish that times out
(or finds no stream leader, or a connection being re-made) is retried for as
long as it lasts (``rlvr.actors.retry``), counted in
``counters["publish_retry"]`` and logged, and the same task id is sent
again (deduplicated if the first copy did land). Any other error is raised. A slot is never occupied
for good: a task whose group has not completed or been dropped within
``task_timeout_s`` frees its slot (``counters["task_expired"]``). That
covers a task whose samples will never come, such as a task id republished
after a restart (``counters["republished_duplicate"]``, JetStream drops the
copy) whose first copy's samples were already consumed.

After a restart the learner replays SCORED while the feeder republishes, so a
task's group can complete before the feeder has published the task again:
such a completion is remembered (``_done_early``, the last ``DONE_EARLY``
ids) and the republished task takes no slot (``counters["done_before_issued"]``).
Before, its slot was held until ``task_timeout_s`` (240 s in a test run, 20
minutes at the defaults) while nothing was left to come.

While training samples keep failing (an agent that raises, a reward function
that cannot run: ``rlvr.learner.watch.failure_stop``), the learner sets
``delay_s`` and the feeder waits that long before each task
(``counters["backoff_waits"]``): a failing task is not regenerated at machine
speed. The learner sets it back to 0 at the first usable sample.
"""

from __future__ import annotations

import random
import time
from collections import Counter, OrderedDict, defaultdict, deque
from typing import Any

import anyio

from rlvr.actors.bus import Bus
from rlvr.actors.logs import get_logger
from rlvr.actors.retry import FOREVER, retrying
from rlvr.actors.tracing import tracer
from rlvr.learner.data.datasets import TaskSpec
from rlvr.protocol import SamplingParams, Task

log = get_logger("rlvr.feeder")

DONE_EARLY = 4096  # completions of tasks not (yet) outstanding, remembered


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
        task_timeout_s: float = 1800.0,
        publish_backoff_max_s: float = 10.0,
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
        self.task_timeout_s = task_timeout_s
        self.publish_backoff_max_s = publish_backoff_max_s
        # Task id -> monotonic time it was published; its slot is held until done or expired.
        self.outstanding: dict[str, float] = {}
        self.counters: Counter[str] = Counter({"publish_retry": 0, "task_expired": 0, "republished_duplicate": 0,
                                               "done_before_issued": 0, "backoff_waits": 0})
        self._done_early: OrderedDict[str, None] = OrderedDict()
        self.policy_version = 0
        self.paused = False
        self.delay_s = 0.0  # the wait before each task while samples keep failing (set by the learner)
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
        """A group completed or was dropped: its slot frees up (or, not published yet in this process, it
        will take none)."""
        if self.outstanding.pop(task_id, None) is None:
            self._done_early[task_id] = None
            while len(self._done_early) > DONE_EARLY:
                self._done_early.popitem(last=False)
        if rewards and index is not None:
            self.pass_rate[index].append(sum(r > 0 for r in rewards) / len(rewards))
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def expire(self, now: float | None = None) -> list[str]:
        """Free the slots of tasks outstanding longer than ``task_timeout_s``."""
        now = time.monotonic() if now is None else now
        old = [t for t, at in self.outstanding.items() if now - at > self.task_timeout_s]
        for task_id in old:
            del self.outstanding[task_id]
            self.counters["task_expired"] += 1
            log.warning("task_expired", task_id=task_id, after_s=self.task_timeout_s,
                        note="its group never completed; the slot is freed")
        if old:
            self._wake()
        return old

    async def run(self) -> None:
        while True:
            await self._slot()
            if self.delay_s > 0:  # samples keep failing: back off (read at each task: a success ends it)
                self.counters["backoff_waits"] += 1
                await anyio.sleep(self.delay_s)
                await self._slot()
            await self.publish_one()

    async def _slot(self) -> None:
        """Until the feeder runs and a slot is free."""
        while self.paused or len(self.outstanding) >= self.max_inflight:
            # Wake at least every so often to free the slots of tasks that never completed.
            with anyio.move_on_after(max(1.0, self.task_timeout_s / 10)):
                await self._changed.wait()
            self.expire()

    async def publish_one(self) -> Task:
        k = self.issued
        spec = self.spec_for(k)
        if self.curriculum == "pass_rate":
            spec = self._prefer_informative(k, spec)
        task = spec.to_task(
            run=self.bus.names.run, task_id=self.task_id(k), n=self.group_size, sampling=self.sampling,
            policy_version=self.policy_version,
        )
        await self._publish_with_retry(task)
        if task.task_id in self._done_early:  # its group was replayed and completed already
            del self._done_early[task.task_id]
            self.counters["done_before_issued"] += 1
        else:
            self.outstanding[task.task_id] = time.monotonic()
        self.issued = k + 1
        return task

    async def _publish_with_retry(self, task: Task) -> None:
        """Publish ``task``, retrying transient bus faults for as long as they last
        (the server comes back; the learner has nothing else to do meanwhile)."""

        def count(_: BaseException) -> None:
            self.counters["publish_retry"] += 1

        async for attempt in retrying("publish_task", until=FOREVER, wait_initial=0.2,
                                      wait_max=self.publish_backoff_max_s, on_retry=count, task_id=task.task_id):
            with attempt:
                ack = await publish_task(self.bus, task)
        if getattr(ack, "duplicate", False):
            # Published before a restart (or by a retry whose first try landed).
            self.counters["republished_duplicate"] += 1

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


async def publish_task(bus: Bus, task: Task) -> Any:
    """Open the task's trace and publish it (the trace's root span)."""
    with tracer().start_as_current_span(
        "feeder.task",
        attributes={
            "rlvr.task_id": task.task_id,
            "rlvr.purpose": task.purpose,
            "rlvr.policy_version": task.policy_version,
        },
    ):
        return await bus.publish(bus.names.tasks, task, msg_id=task.task_id)
