"""The rollout actor: tasks in, one Sample per completion out.

It pulls tasks from the shared ``rollout`` consumer (at most
``max_inflight_tasks`` in hand; the engine batches them continuously), keeps
each alive with ``in_progress`` while it generates, publishes the group's
samples as one ``SampleGroup`` with ``Nats-Msg-Id = task_id/group``, and acks
the task only after JetStream acknowledged it. A redelivered task republishes
the same id, which JetStream's duplicate window drops.

Policy versions: a sample carries the lowest and the highest weights version
it was generated under (they differ only when a reload landed mid-generation).

Weight reloads come from ``rlvr.rollout.weights_sync`` (announcements on the
WEIGHTS stream). A prompt the engine rejects as too long still yields ``n``
samples with ``finish_reason = "rejected"`` so the learner's group accounting
closes; their text says why ("prompt has 40 tokens > limit 32"); the verifier
scores them ``parse_error`` and the learner counts the drop. A group too
large for one message goes by reference (its samples in the run's bodies
bucket, actors/bodies.py); one past ``bus.max_group_bytes`` is published as
rejected samples in the same way, their text naming the key and the sizes,
never generated again and again. An engine that died ends the replica with a
non-zero exit.

With ``[rollout.agent]`` set, the replica serves an ``AgentEndpoint`` and plays
every task without an ``env`` as ``n`` episodes of that agent
(rollout/agents/runner.py, docs/agents.md), at most ``max_concurrent`` at once.
"""

from __future__ import annotations

import time

import anyio

from rlvr.actors.bodies import GroupTooLargeError, publish_group
from rlvr.actors.consume import ActorFatalError, Consumer, Delivery, Nak
from rlvr.actors.logs import get_logger
from rlvr.actors.meters import LatencyMeter, RateMeter
from rlvr.actors.runtime import ActorContext, HeartbeatFields
from rlvr.actors.tracing import hop_span
from rlvr.protocol import Sample, SampleGroup, Task, Timings, decode
from rlvr.protocol.tasks import task_meaning
from rlvr.protocol.validate import MessageInvalidError, check_task
from rlvr.rollout.config import RolloutConfig
from rlvr.rollout.engines.base import EngineDeadError, GroupResult, PromptTooLongError, make_engine
from rlvr.rollout import rlpr
from rlvr.rollout.episodes import EpisodeResult, EpisodeSettings, check_env_spec, run_episode, single_turn

log = get_logger("rlvr.rollout")


class RolloutActor:
    role = "rollout"

    def __init__(self, cfg: RolloutConfig) -> None:
        self.cfg = cfg
        self.engine = make_engine(cfg.engine)
        self.consumer: Consumer[Task] | None = None
        self.tokens = RateMeter()
        self.samples = RateMeter()
        self.queue_wait = LatencyMeter()
        self.weights_load_s = 0.0
        self.weights_fetch_s = 0.0
        self.abort_scopes: set[anyio.CancelScope] = set()
        self.agent_endpoint = None
        self.agents = None  # AgentRunner, with [rollout.agent]
        self.episode_settings = EpisodeSettings(cfg.env_timeout_s, cfg.tool_timeout_s, cfg.tool_format,
                                                cfg.on_template_rewrite)

    @property
    def version(self) -> int:
        return self.engine.weights_version

    async def run(self, ctx: ActorContext) -> None:
        from rlvr.rollout.builtin_tools import use_sandbox
        from rlvr.rollout.envs.registry import load_environments
        from rlvr.rollout.weights_sync import WeightsWatcher

        self.ctx = ctx
        load_environments(self.cfg.environments)  # a bad plug-in stops the replica here, naming it
        use_sandbox(self.cfg.sandbox)
        await self.engine.start()
        log.info("engine_ready", engine=self.cfg.engine.__struct_config__.tag)
        if self.cfg.environments or self.cfg.agent is not None:
            self._check_chat_template()
        try:
            if self.cfg.agent is not None:
                await self._start_agents()
            watcher = WeightsWatcher(ctx.bus, self, self.cfg)
            self.consumer = Consumer(
                ctx.bus,
                ctx.bus.consumer_def("rollout"),
                stage="rollout",
                decode=lambda data: decode(data, Task),
                handle=self.handle,
                concurrency=self.cfg.max_inflight_tasks,
                task_id_of=lambda task: task.task_id,
                # Bounds n, max_tokens and prompt size, and an episode's environment must
                # exist here with valid params: such a task is dead-lettered with the reason.
                validate=self.check_task,
                keep_alive_every_s=self.cfg.in_progress_every_s,
                # A task re-issued after a learner restart is not generated twice.
                meaning=task_meaning,
            )
            async with anyio.create_task_group() as tg:
                await tg.start(watcher.run)
                await self.consumer.run(ctx.stop)
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                if self.agent_endpoint is not None:
                    await self.agent_endpoint.stop()
                await self.engine.close()

    async def _start_agents(self) -> None:
        """The agent's endpoint on this replica and the runner that plays its episodes."""
        from rlvr.protocol import SamplingParams
        from rlvr.rollout.agents.endpoint import AgentEndpoint
        from rlvr.rollout.agents.runner import AgentRunner

        agent = self.cfg.agent
        assert agent is not None
        self.agent_endpoint = AgentEndpoint(self.engine, sampling=SamplingParams(), tool_format=self.cfg.tool_format,
                                            host=agent.host, port=agent.port, model_name=agent.model_name)
        self.agents = AgentRunner(agent, self.agent_endpoint)  # a missing program or callable stops us here
        await self.agent_endpoint.start()

    def _check_chat_template(self) -> None:
        """Episodes render every turn with the model's chat template: a model without one is a
        start-up error that names it, not a replica whose every task fails (issue 33)."""
        from rlvr.rollout.transcript import TemplateMissingError

        try:
            self.engine.chat_codec()
        except TemplateMissingError as e:
            model = getattr(self.cfg.engine, "model", "") or self.cfg.engine.__struct_config__.tag
            raise TemplateMissingError(
                f"{self._episodes_by()}, and episodes are rendered with the "
                f"model's chat template, but the model {model!r} (rollout.engine.model) has none ({e}); give its "
                "tokenizer a chat_template (tokenizer_config.json), or use a chat model") from None

    def _episodes_by(self) -> str:
        if self.cfg.environments:
            return f"rollout.environments lists {', '.join(self.cfg.environments)}"
        return f"rollout.agent runs {self.cfg.agent.name}"  # type: ignore[union-attr]

    async def handle(self, task: Task, delivery: Delivery) -> Nak | None:
        picked_up = time.time()
        self.queue_wait.add(max(0.0, picked_up - task.created_at))
        with hop_span(
            "rollout.generate",
            delivery.trace_context,
            {"rlvr.task_id": task.task_id, "rlvr.n": task.n, "rlvr.replica": self.ctx.replica},
        ) as span:
            with anyio.CancelScope() as abort_scope:
                self.abort_scopes.add(abort_scope)
                try:
                    results = await self._generate(task, delivery)
                finally:
                    self.abort_scopes.discard(abort_scope)
            if abort_scope.cancelled_caught:
                # Aborted for a weight reload (reload_policy = "abort_requeue").
                return Nak(0.0, "aborted for a weight reload")
            generate_s = time.time() - picked_up
            if span.is_recording():
                span.set_attributes({"rlvr.policy_version": min(r.policy_version for r in results),
                                     "rlvr.tokens": sum(len(r.completion.ids) for r in results)})
            await self._publish(task, results, picked_up, generate_s)
        return None

    def check_task(self, task: Task) -> None:
        check_task(task)
        if task.env is not None:
            try:
                check_env_spec(task.env)
            except ValueError as e:  # unknown environment, bad params
                raise MessageInvalidError(str(e)) from None

    async def _generate(self, task: Task, delivery: Delivery) -> list[EpisodeResult]:
        # Kept alive meanwhile by the consumer's ticker (keep_alive_every_s).
        try:
            if task.env is not None:
                return await self._episodes(task)
            if self.agents is not None:
                return await self._agent_episodes(task)
            return single_turn(await self.engine.generate(task.prompt, task.n, task.sampling))
        except PromptTooLongError as e:
            log.warning("prompt_rejected", reason=str(e))
            return single_turn(_rejected(task, self.version, f"{e} (rollout.engine.max_prompt_tokens)"), rejected=True)
        except EngineDeadError as e:
            raise ActorFatalError(f"engine died: {e}") from e

    async def _episodes(self, task: Task) -> list[EpisodeResult]:
        """The task's n episodes, side by side (the engine batches their turns)."""
        results: list[EpisodeResult | None] = [None] * task.n

        async def one(i: int) -> None:
            results[i] = await run_episode(self.engine, task, i, self.episode_settings)

        async with anyio.create_task_group() as tg:
            for i in range(task.n):
                tg.start_soon(one, i)
        return [r for r in results if r is not None]

    async def _agent_episodes(self, task: Task) -> list[EpisodeResult]:
        """The task's n samples as episodes of the agent, side by side (the runner bounds how many run)."""
        results: list[EpisodeResult | None] = [None] * task.n
        agents = self.agents
        assert agents is not None

        async def one(i: int) -> None:
            results[i] = await agents.play(task, i)

        async with anyio.create_task_group() as tg:
            for i in range(task.n):
                tg.start_soon(one, i)
        return [r for r in results if r is not None]

    async def _publish(
        self, task: Task, results: list[EpisodeResult], picked_up: float, generate_s: float
    ) -> None:
        measures: list[dict[str, float]] = [{} for _ in results]
        if rlpr.requested(task) is not None and results and not results[0].finish_reason == "rejected":
            # Under the weights that just generated, before any reload (docs/rewards.md, RLPR).
            measures = await rlpr.measure(self.engine, task, results[0].prompt_ids, [r.text for r in results])
        # One message for the whole group (protocol/groups.py): a hop costs per message, not per byte.
        # The task is acked (by the caller) only after its PubAck is in; a failed publish naks the
        # task, and the group published again is deduplicated by its Nats-Msg-Id. A group too large
        # for one message goes by reference (actors/bodies.py).
        samples = self._samples(task, results, measures, picked_up, generate_s)
        group = SampleGroup(task.run, task.task_id, samples)
        try:
            await publish_group(self.ctx.bus, self.ctx.names.rollouts, group, group.msg_id)
        except GroupTooLargeError as e:
            # Past every bound (bus.max_group_bytes): generating it again would fail again, a crash loop
            # that loses it after max_deliver tries, saying nothing. It goes as the group's samples
            # rejected, naming the key and the sizes: scored parse_error, counted by the learner.
            log.warning("group_rejected", task_id=task.task_id, reason=e.reason)
            rejected = single_turn(_rejected(task, self.version, e.reason), rejected=True)
            group = SampleGroup(task.run, task.task_id,
                                self._samples(task, rejected, [{} for _ in rejected], picked_up, generate_s))
            await publish_group(self.ctx.bus, self.ctx.names.rollouts, group, group.msg_id)
        self.tokens.add(sum(s.completion.policy_tokens() for s in samples))
        self.samples.add(len(samples))

    def _samples(self, task: Task, results: list[EpisodeResult], measures: list[dict[str, float]], picked_up: float,
                 generate_s: float) -> list[Sample]:
        return [
            Sample(
                run=task.run,
                task_id=task.task_id,
                sample_index=i,
                group_id=task.task_id,
                group_size=task.n,
                prompt_ids=r.prompt_ids,
                completion=r.completion,
                text=r.text,
                finish_reason=r.finish_reason,
                policy_version=r.policy_version,
                policy_version_max=r.policy_version_max,
                verifier=task.verifier,
                sampling=task.sampling,
                replica=self.ctx.replica,
                purpose=task.purpose,
                dataset=task.dataset,
                index=task.index,
                level=task.level,
                prompt=task.prompt,
                record=task.record,
                episode=r.episode,
                measures=measures[i],
                timings=Timings(
                    queued_s=max(0.0, picked_up - task.created_at),
                    generate_s=generate_s,
                    finished_at=time.time(),
                ),
            )
            for i, r in enumerate(results)
        ]

    def abort_in_flight(self) -> int:
        for scope in list(self.abort_scopes):
            scope.cancel()
        return len(self.abort_scopes)

    def heartbeat(self) -> HeartbeatFields:
        counters = dict(self.consumer.stats.counters) if self.consumer else {}
        counters["samples_total"] = self.samples.total
        counters["tokens_total"] = self.tokens.total
        if self.agents is not None:  # agent episodes by end reason, and callables left running
            counters.update({f"agent_end_{reason}": k for reason, k in self.agents.ends.items()})
            counters["agent_abandoned"] = self.agents.abandoned
        return HeartbeatFields(
            policy_version=self.version,
            in_flight=self.consumer.stats.in_flight if self.consumer else 0,
            counters=counters,
            gauges={
                "tokens_per_s": self.tokens.rate(),
                "samples_per_s": self.samples.rate(),
                "queue_wait_p50_s": self.queue_wait.quantile(0.5),
                "queue_wait_p99_s": self.queue_wait.quantile(0.99),
                "weights_fetch_s": self.weights_fetch_s,
                "weights_load_s": self.weights_load_s,
                **({"agent_episodes_running": float(self.agents.running)} if self.agents is not None else {}),
            },
        )


def _rejected(task: Task, version: int, why: str) -> GroupResult:
    """``n`` empty generations for a rejected task (a prompt too long, a group too large); their text says
    why, naming the key (the verifier never reads it: it scores a rejected sample at once, quoting this,
    so the learner can name the limit and its numbers)."""
    from rlvr.rollout.engines.base import Generation

    empty = Generation(ids=[], logprobs=[], text=why, finish_reason="abort")
    return GroupResult(
        prompt_ids=[], generations=[empty] * task.n, weights_version_min=version, weights_version_max=version
    )
