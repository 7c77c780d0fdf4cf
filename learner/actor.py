"""The learner actor: feeder, group assembly, filters, optimizer steps,
checkpoints, weight broadcast and evaluation, in one process (rank 0).

Data flow inside the process:

    SCORED consumer --on_scored--> GroupAssembler --complete group--> ready queue
        (eval groups go to the Evaluator instead)
    train loop: take groups from the ready queue, filter (stale, failed,
        zero-variance), until ``groups_per_step`` are kept -> one optimizer step
        -> publish weights every ``sync_every`` -> checkpoint every ``checkpoint_every``

Exactly-once: a sample counts as consumed only when the checkpoint that
covers its fate (trained or dropped) is committed. Recovery does not rest on
acks: SCORED keeps its messages (limits retention), and after a crash the
learner recreates its consumer at the checkpointed sequence floor and skips
the ids the checkpoint lists (``rlvr.learner.ledger``). So a message is held
(``Hold``) only while its sample is pending, in a group being assembled or a
batch not yet trained, and acked as soon as its fate is settled; the acks
bound what JetStream redelivers, nothing more. Without ``[learn.engine]`` the
learner runs dry: everything above but the optimizer and weights.
"""

from __future__ import annotations

import functools
import json
import time
from collections import Counter
from pathlib import Path

import anyio
import msgspec
from nats.aio.msg import Msg
from opentelemetry import trace
from opentelemetry.trace import Link

from rlvr.actors.consume import Ack, Consumer, Delivery, Hold
from rlvr.actors.logs import get_logger
from rlvr.actors.runtime import ActorContext, HeartbeatFields
from rlvr.actors.tracing import span_context_from_headers, tracer
from rlvr.learner.checkpoint import CheckpointStore, LearnerState, LedgerEntry
from rlvr.learner.config import LearnConfig
from rlvr.learner.datasets import load_splits
from rlvr.learner.evaluation import Evaluator
from rlvr.learner.feeder import Feeder
from rlvr.learner.groups import DropCounter, Group, GroupAssembler, filter_group
from rlvr.learner.ledger import Ledger
from rlvr.learner.metrics import MetricsWriter, batch_metrics
from rlvr.learner.rollout_versions import RolloutVersions
from rlvr.protocol import OUTCOMES, Scored, decode

log = get_logger("rlvr.learner")


class LearnActor:
    role = "learn"

    def __init__(self, cfg: LearnConfig, *, seed: int, run_dir: str = "") -> None:
        self.cfg = cfg
        self.seed = seed
        self.run_dir = run_dir
        self.state = LearnerState()
        self.consumer: Consumer[Scored] | None = None
        self.trainer = None
        self.last_metrics: dict[str, float] = {}
        self.started = time.monotonic()

    # --- set-up -------------------------------------------------------------------
    async def run(self, ctx: ActorContext) -> None:
        self.ctx = ctx
        cfg = self.cfg
        self.out = Path(cfg.out_dir or self.run_dir or f"runs/{ctx.names.run}")
        self.store = CheckpointStore(self.out / "checkpoints")
        loaded = self.store.load_latest()
        self.state = loaded or LearnerState()
        splits = await anyio.to_thread.run_sync(functools.partial(load_splits, cfg.dataset, seed=self.seed))
        if cfg.engine is not None:
            from rlvr.learner.trainer import Trainer

            self.trainer = Trainer(cfg.engine, seed=self.seed)
            await self.trainer.start(self.store.committed_engine_dir() if loaded else None)
        self.ledger = Ledger(self.state.ledger)
        self.drops = DropCounter()
        self.drops.samples.update(self.state.drops)
        # Verifier outcomes of every training sample received (kept or dropped), run totals.
        self.outcomes = Counter(self.state.outcomes)
        self.feeder = Feeder(
            ctx.bus, splits.train, group_size=cfg.group_size, sampling=cfg.sampling,
            max_inflight=cfg.inflight_limit, seed=self.seed, issued=self.state.issued,
            curriculum=cfg.curriculum,
        )
        self.feeder.policy_version = self.state.version
        self.evaluator = Evaluator(ctx.bus, splits.heldout, cfg.eval, cfg.sampling)
        self.assembler = GroupAssembler(cfg.group_timeout_s)
        self.held: dict[str, Msg] = {}
        # Fates since the last checkpoint, written to its ledger entry.
        self.step_trained: list[str] = []
        self.step_drops: dict[str, str] = {}
        self.span_ctx: dict[str, trace.SpanContext] = {}
        self.ready_send, self.ready_recv = anyio.create_memory_object_stream[Group](10_000)
        self.metrics = MetricsWriter(self.out)
        self.rollouts = RolloutVersions(ctx.bus)
        cd = ctx.bus.consumer_def("learn")
        # Pending samples are bounded by the tasks in flight, plus the groups
        # waiting for a step: never let the server's limit stall the learner.
        need = 4 * cfg.inflight_limit * cfg.group_size + cfg.eval.prompts * cfg.eval.n
        cd = msgspec.structs.replace(cd, max_ack_pending=max(cd.max_ack_pending, need))
        self.consumer = Consumer(
            ctx.bus, cd, stage="learn", decode=lambda d: decode(d, Scored), handle=self.on_scored,
            concurrency=256, task_id_of=lambda s: s.sample.task_id,
            start_seq=self.state.ledger.floor if loaded else None,
        )
        log.info("learner_start", resumed_at_step=self.state.step if loaded else None,
                 train_tasks=len(splits.train), heldout=len(splits.heldout), trainer=cfg.engine is not None)
        consumer_stop = anyio.Event()
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self.consumer.run, consumer_stop)
                await tg.start(self.rollouts.run)
                tg.start_soon(self._keep_held_alive)
                tg.start_soon(self._expire_partial_groups)
                await self._main(ctx, tg, resumed=loaded is not None)
                consumer_stop.set()
                tg.cancel_scope.cancel()
        finally:
            self.metrics.close()

    async def _main(self, ctx: ActorContext, tg: anyio.abc.TaskGroup, resumed: bool) -> None:
        with anyio.CancelScope() as scope:
            tg.start_soon(_cancel_on, ctx.stop, scope)
            if self.trainer is not None and self.state.version > 0:
                await self._publish_weights()  # rollouts may hold older weights than the checkpoint
            if self.evaluator.enabled and not any(e["label"] == "before" for e in self.state.eval_history):
                await self._evaluate("before")
            tg.start_soon(self.feeder.run)
            while self.state.step < self.cfg.steps:
                await self._one_step()
            self.feeder.paused = True
            if self.evaluator.enabled:
                await self._evaluate("after")
            await self._checkpoint(final=True)
            self._write_summary()
            log.info("learner_done", steps=self.state.step, samples_trained=self.state.samples_trained)
        if scope.cancelled_caught:
            log.info("learner_stopped", step=self.state.step, note="uncommitted steps will be replayed")

    # --- the step -----------------------------------------------------------------
    async def _one_step(self) -> None:
        cfg = self.cfg
        t_wait = time.monotonic()
        batch: list[Group] = []
        while len(batch) < cfg.groups_per_step:
            group = await self.ready_recv.receive()
            result = filter_group(
                group, current_version=self.state.version, max_staleness=cfg.max_staleness,
                dynamic_sampling=cfg.dynamic_sampling, zero_variance_eps=cfg.zero_variance_eps,
            )
            self.drops.count(result)
            self.outcomes.update(sc.verdict.outcome for _, sc in group.members)
            for _, sc, reason in result.dropped:
                await self._settle(sc.sample_id)
                self.step_drops[sc.sample_id] = reason
            self.feeder.done(group.group_id, [sc.verdict.reward for _, sc in group.members],
                             group.members[0][1].sample.index)
            if result.kept:
                batch.append(Group(group.group_id, group.size, result.kept, group.first_seen))
        wait_s = time.monotonic() - t_wait
        scored = [[sc for _, sc in g.members] for g in batch]
        ids = [sc.sample_id for g in scored for sc in g]
        links = [Link(c) for sid in ids if (c := self.span_ctx.get(sid)) is not None]
        with tracer().start_as_current_span("learn.step", links=links) as span:
            t0 = time.monotonic()
            metrics = await self.trainer.train(scored) if self.trainer else {}
            train_s = time.monotonic() - t0
            self.state.step += 1
            span.set_attribute("rlvr.step", self.state.step)
            for sid in ids:
                await self._settle(sid)
            self.step_trained += ids
            self.state.samples_trained += len(ids)
            # Batch statistics against the version the batch was filtered under.
            stats = batch_metrics(scored, self.state.version)
            publish_s = 0.0
            if self.trainer and self.state.step % cfg.sync_every == 0:
                publish_s = await self._publish_weights(bump=True)
            engine_metrics = {("engine_step" if k == "step" else k): v for k, v in metrics.items()}
            record = {
                **stats, **engine_metrics, **self._run_totals(),
                "step": self.state.step, "policy_version": self.state.version, "wait_s": wait_s,
                "train_s": train_s, "publish_s": publish_s, "samples": len(ids), "groups": len(batch),
                "samples_trained": self.state.samples_trained,
            }
            for k, v in record.items():
                if isinstance(v, (int, float)):
                    span.set_attribute(f"rlvr.{k}", v)
        self.metrics.write(record)
        self.last_metrics = record
        log.info("step", **{k: round(v, 4) if isinstance(v, float) else v for k, v in record.items()
                            if k in ("step", "reward_mean", "samples", "wait_s", "train_s", "policy_version")})
        if self.state.step % cfg.checkpoint_every == 0:
            await self._checkpoint()
        if cfg.eval.every_steps and self.state.step % cfg.eval.every_steps == 0 and self.state.step < cfg.steps:
            await self._evaluate(f"step{self.state.step}")

    def _run_totals(self) -> dict[str, float]:
        total_groups = sum(self.drops.groups.values())
        out: dict[str, float] = {k: float(v) for k, v in self.drops.as_dict().items()}
        seen_groups = total_groups + self.state.step * self.cfg.groups_per_step
        out["zero_variance_share"] = self.drops.groups["zero_variance"] / seen_groups if seen_groups else 0.0
        out.update({f"outcome_{o}": float(self.outcomes.get(o, 0)) for o in OUTCOMES})
        return out

    # --- custody, checkpoints, weights -----------------------------------------------
    async def on_scored(self, scored: Scored, delivery: Delivery) -> Ack | Hold:
        sid, seq = scored.sample_id, delivery.stream_seq
        if self.ledger.already_consumed(sid, seq) or sid in self.ledger.settled_uncommitted:
            return Ack()  # its fate is decided (before a restart, or earlier in this one)
        if sid in self.ledger.pending:
            if self.ledger.pending[sid] == seq:
                self.held[sid] = delivery.msg  # a redelivery of the message we hold
                return Hold()
            self.drops.samples["duplicate"] += 1
            return Ack()  # the same sample published twice: one copy is enough
        self.ledger.received(sid, seq)
        self.held[sid] = delivery.msg
        if (c := span_context_from_headers(delivery.headers)) is not None:
            self.span_ctx[sid] = c
        group = self.assembler.add(seq, scored)
        if group is not None:
            if group.purpose == "eval":
                self.evaluator.add(group)
                for _, sc in group.members:
                    await self._settle(sc.sample_id)
            else:
                self.ready_send.send_nowait(group)
        return Hold()

    async def _settle(self, sid: str) -> None:
        """The sample's fate is decided: record it for the next checkpoint, ack it."""
        if sid in self.ledger.pending:
            self.ledger.settle(sid)
        self.span_ctx.pop(sid, None)  # the step span has taken its link already
        msg = self.held.pop(sid, None)
        if msg is not None:
            await msg.ack()

    async def _checkpoint(self, final: bool = False) -> None:
        self.state.issued = self.feeder.issued
        self.state.drops = dict(self.drops.samples)
        self.state.outcomes = dict(self.outcomes)
        if self.trainer is not None:
            await self.trainer.save(self.store.engine_dir(self.state.commits + 1))
        ledger_state, consumed = self.ledger.commit()
        self.state.ledger = ledger_state
        entry = LedgerEntry(self.state.step, self.step_trained, self.step_drops)
        await anyio.to_thread.run_sync(self.store.commit, self.state, entry)
        self.step_trained, self.step_drops = [], {}
        await self.ctx.bus.kv_put("learner", json.dumps({"step": self.state.step, "version": self.state.version}).encode())
        log.info("checkpoint", step=self.state.step, floor=ledger_state.floor, committed=len(consumed), final=final)

    async def _publish_weights(self, bump: bool = False) -> float:
        t0 = time.monotonic()
        if bump:
            self.state.version += 1
        await self.trainer.publish(
            self.ctx.bus, self.out / "weights", self.state.version, self.state.step, self.cfg.weights_transport
        )
        self.feeder.policy_version = self.state.version
        return time.monotonic() - t0

    async def _evaluate(self, label: str) -> None:
        if label != "before" and self.trainer is not None:
            await self.rollouts.wait_for_version(self.state.version, timeout_s=120)
        self.state.eval_rounds += 1
        result = await self.evaluator.run_round(self.state.eval_rounds, label, self.state.version, timeout_s=self.cfg.eval.timeout_s)
        result["step"] = self.state.step
        self.state.eval_history.append(result)
        self.metrics.write({"event": "eval", **result})
        log.info("eval", **{k: v for k, v in result.items() if not isinstance(v, dict)})

    async def _keep_held_alive(self) -> None:
        every = self.ctx.bus.cfg.ack_wait_s / 3
        while True:
            await anyio.sleep(every)
            for msg in list(self.held.values()):
                await msg.in_progress()

    async def _expire_partial_groups(self) -> None:
        while True:
            await anyio.sleep(min(30.0, self.cfg.group_timeout_s / 4))
            for group in self.assembler.expire():
                self.drops.samples["partial"] += len(group.members)
                self.drops.groups["partial"] += 1
                for _, sc in group.members:
                    await self._settle(sc.sample_id)
                if group.purpose == "train":
                    self.outcomes.update(sc.verdict.outcome for _, sc in group.members)
                    self.feeder.done(group.group_id)

    def _write_summary(self) -> None:
        evals = self.state.eval_history
        before = next((e for e in evals if e["label"] == "before"), {})
        after = next((e for e in reversed(evals) if e["label"] == "after"), {})
        summary = {
            "run": self.ctx.names.run, "steps": self.state.step, "samples_trained": self.state.samples_trained,
            "policy_version": self.state.version, "pass_at_1_before": before.get("pass_at_1"),
            "pass_at_1_after": after.get("pass_at_1"), "evals": evals, "drops": dict(self.drops.samples),
            "verifier_outcomes": {o: self.outcomes.get(o, 0) for o in OUTCOMES},
            "learner_wall_seconds": time.monotonic() - self.started, "trainer": self.cfg.engine is not None,
        }
        (self.out / "learner_summary.json").write_text(json.dumps(summary, indent=2))

    def heartbeat(self) -> HeartbeatFields:
        gauges = {k: float(v) for k, v in self.last_metrics.items() if isinstance(v, (int, float))}
        gauges.update(held=float(len(getattr(self, "held", {}))),
                      outstanding_tasks=float(len(self.feeder.outstanding)) if hasattr(self, "feeder") else 0.0)
        return HeartbeatFields(
            policy_version=self.state.version,
            in_flight=len(getattr(self, "held", {})),
            counters={"step": float(self.state.step), "samples_trained": float(self.state.samples_trained),
                      **{f"drop_{k}": float(v) for k, v in getattr(self, "drops", DropCounter()).samples.items()}},
            gauges=gauges,
        )


async def _cancel_on(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


