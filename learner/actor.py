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
the ids the checkpoint lists (``rlvr.learner.custody.ledger``). So a message is held
(``Hold``) only while its sample is pending, in a group being assembled or a
batch not yet trained, and acked as soon as its fate is settled; the acks
bound what JetStream redelivers, nothing more. Without ``[learn.engine]`` the
learner runs dry: everything above but the optimizer and weights.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import msgspec
from opentelemetry.trace import Link

from rlvr.actors.bus_faults import is_transient_bus_fault
from rlvr.actors.consume import Ack, Consumer, Delivery, Hold, Term
from rlvr.actors.logs import get_logger
from rlvr.actors.retry import FOREVER, retrying
from rlvr.actors.runtime import ActorContext, HeartbeatFields
from rlvr.actors.tracing import remote_span_context, tracer
from rlvr.learner.watch.alarms import Alarm
from rlvr.learner.watch.failure_stop import RunCannotLearnError
from rlvr.learner.data.history import PromptHistory, read_selection, subset
from rlvr.learner.custody.checkpoint import CheckpointStore, LearnerState, is_disk_full
from rlvr.learner.custody.custody import CONFLICT_ERROR, Custody, span_links
from rlvr.learner.config import LearnConfig, train_dataset
from rlvr.learner.data.datasets import load_splits
from rlvr.learner.watch.eval_rounds import Evaluator
from rlvr.learner.data.feeder import Feeder
from rlvr.learner.intake import ScoredIntake
from rlvr.learner.data.pacing import Pacing
from rlvr.learner.custody.groups import Group, GroupAssembler, filter_group, judged
from rlvr.learner.custody.lease import LearnerLease
from rlvr.learner.watch.metrics import MetricsWriter, batch_metrics, write_json_atomic, write_jsonl
from rlvr.learner.watch.records import StepRecord, eval_summary
from rlvr.learner.weights.rollout_versions import RolloutVersions
from rlvr.learner.watch.sample_dump import SampleDump
from rlvr.learner.watch.run_watch import RunWatch
from rlvr.learner.watch.tally import RunTally
from rlvr.protocol import OUTCOMES, ScoredGroup, decode
from rlvr.protocol.groups import group_rank
from rlvr.protocol.subjects import KV_CONFIG, KV_LEARNER

if TYPE_CHECKING:
    from rlvr.learner.watch.failure_stop import CannotLearn
    from rlvr.learner.weights.collective import CollectiveHost
    from rlvr.learner.train.trainer import Trainer

log = get_logger("rlvr.learner")

_FAILURE_CHECK_EVERY_S = 5.0  # while no group comes: how often the failure watch's time-based checks run


class LearnActor:
    """The learner role. Its whole state is made in ``__init__`` (what needs
    no bus and no disk) and ``_restore`` (the checkpoint, the datasets, the
    engine and the parts that talk to the bus), and nowhere else."""

    role = "learn"

    def __init__(
        self, cfg: LearnConfig, *, run: str, seed: int, run_dir: str = "", resolved_config: bytes = b""
    ) -> None:
        self.cfg = cfg
        self.seed = seed
        self.resolved_config = resolved_config  # published to the run's KV at start (redacted by the caller)
        self.out = Path(cfg.out_dir or run_dir or f"runs/{run}")
        self.started = time.monotonic()
        self.started_unix = time.time()
        self.state = LearnerState()
        # Every sample's fate, from its arrival to the checkpoint that records it.
        self.custody = Custody()
        self.assembler = GroupAssembler(cfg.group_timeout_s)
        self._expired_at = 0.0  # stream time of the last expiry pass
        self._step_lock = anyio.Lock()  # one optimizer step, or one checkpoint taken while idle, at a time
        # The progress timer's summary write (in a thread) never lands after the stop's last word.
        self._summary_lock = anyio.Lock()
        self._summary_final = False
        # Says early when the reward carries no signal or the steps go wrong, and when samples fail in a row:
        # an alarm quoting the first failure, the feeder's backoff, the stop of a run that cannot learn.
        self.watches = RunWatch(cfg.alarms, cfg.failures)
        self.failures = self.watches.failures
        # Episode ends, tool errors and the pass rate by verifier over every training group.
        self.tally = RunTally()
        # What each step trained, for a person to read: <out>/samples/step-<N>.jsonl (docs/samples.md).
        self.dump = SampleDump(self.out, cfg.samples, cfg.engine.advantage if cfg.engine else None)
        self.last_step_at = time.monotonic()
        self.ready_send, self.ready_recv = anyio.create_memory_object_stream[Group](10_000)
        # Tasks in flight and short steps (learner/data/pacing.py: oversample, min_groups_per_step).
        self.pacing = Pacing.for_run(cfg)
        self.last_record: StepRecord | None = None
        self.checkpoint_disk_full = 0  # failed checkpoint writes on a full disk, each retried (heartbeat counter)
        # Made by _restore, once the bus and the checkpoint are at hand.
        self._io: _LearnerIO | None = None
        self.trainer: Trainer | None = None
        self.collective: CollectiveHost | None = None  # weights_transport = "nccl" only

    @property
    def io(self) -> _LearnerIO:
        if self._io is None:
            raise LearnerNotStartedError("the learner's bus-bound parts exist only inside run()")
        return self._io

    # --- set-up -------------------------------------------------------------------
    async def _restore(self, ctx: ActorContext, lease: LearnerLease) -> bool:
        """Load the last checkpoint (if any), the datasets and the engine; wire
        the feeder, evaluator and consumer to the bus. True when resumed."""
        cfg = self.cfg
        store = CheckpointStore(self.out / "checkpoints")
        loaded = store.load_latest()
        if loaded is not None:
            self.state = loaded
            self.custody = Custody.restored(loaded.ledger, loaded.drops, loaded.outcomes)
        await self._check_retention_gap(ctx)
        splits = await anyio.to_thread.run_sync(functools.partial(load_splits, cfg.dataset, seed=self.seed))
        if cfg.train_verifier is not None:  # trained on another reward, measured on the dataset's own
            train = await anyio.to_thread.run_sync(functools.partial(load_splits, train_dataset(cfg), seed=self.seed))
            splits = msgspec.structs.replace(splits, train=train.train)
        if cfg.train_subset:  # a selection (`rlvr-actor select`): only those prompts, drawn again and again
            splits = msgspec.structs.replace(splits, train=subset(splits.train, read_selection(cfg.train_subset)))
        if cfg.engine is not None:
            from rlvr.learner.train.trainer import Trainer  # torch and DeepSpeed: not for a dry learner

            self.trainer = Trainer(cfg.engine, seed=self.seed)
            await self.trainer.start(store.committed_engine_dir() if loaded else None)
        feeder = Feeder(
            ctx.bus, splits.train, group_size=cfg.group_size, sampling=cfg.sampling,
            max_inflight=cfg.inflight_limit, seed=self.seed, issued=self.state.issued,
            curriculum=cfg.curriculum,
            # A task's group normally completes or expires (group_timeout_s) long before this.
            task_timeout_s=2 * cfg.group_timeout_s,
        )
        feeder.policy_version = self.state.version
        cd = ctx.bus.consumer_def("learn")
        # Held group messages are bounded by the tasks in flight, plus the groups
        # waiting for a step: never let the server's limit stall the learner.
        need = 4 * cfg.inflight_limit + cfg.eval.prompts
        cd = msgspec.structs.replace(cd, max_ack_pending=max(cd.max_ack_pending, need))
        consumer = Consumer(
            ctx.bus, cd, stage="learn", decode=lambda d: decode(d, ScoredGroup), handle=self.on_scored,
            concurrency=256, task_id_of=lambda g: g.task_id,
            # Held samples wait for a step and a checkpoint: the consumer keeps them alive.
            keep_alive_every_s=ctx.bus.cfg.ack_wait_s / 3,
            # Always from the checkpointed floor (1 before the first checkpoint): samples acked
            # by a learner that died before committing them are delivered again, none is lost.
            start_seq=self.state.ledger.floor,
            check_copies=False,  # custody keeps one of two conflicting copies by content (Custody.conflict)
        )
        # Off the event loop: it imports TensorBoard (and torch), seconds during which
        # the loop could not renew the lease or answer the bus.
        metrics = await anyio.to_thread.run_sync(functools.partial(
            MetricsWriter, self.out, cfg.trackers, run_name=ctx.names.run, resolved_config=self.resolved_config))
        self._io = _LearnerIO(
            ctx=ctx, store=store, lease=lease, feeder=feeder, consumer=consumer, metrics=metrics,
            history=PromptHistory(self.out), evaluator=Evaluator(ctx.bus, splits.heldout, cfg.eval, cfg.sampling), rollouts=RolloutVersions(ctx.bus),
            intake=ScoredIntake(ctx.bus, self.trainer.engine.vocab_size if self.trainer and self.trainer.engine else None),
        )
        log.info("learner_start", resumed_at_step=self.state.step if loaded else None,
                 train_tasks=len(splits.train), heldout=len(splits.heldout), trainer=cfg.engine is not None)
        return loaded is not None

    async def _check_retention_gap(self, ctx: ActorContext) -> None:
        """Stop if SCORED's retention removed samples this learner never settled
        (it was down longer than the stream keeps them), unless told to go on."""
        floor = self.state.ledger.floor
        first = (await ctx.bus.js.stream_info(ctx.names.stream("SCORED"))).state.first_seq
        if (lost := self.custody.ledger.lost_below(first)) <= 0:
            return
        what = (f"{lost} scored groups (stream sequences {floor} to {first - 1}) were removed by SCORED's "
                f"retention (bus.scored_max_age_s / scored_max_bytes) before this learner trained them")
        if not self.cfg.allow_retention_gap:
            raise RetentionGapError(f"{what}; set learn.allow_retention_gap = true to continue without them")
        log.warning("retention_gap", lost=lost, floor=floor, first_seq=first)
        self.custody.lost(lost, "retention_gap")

    async def run(self, ctx: ActorContext) -> None:
        # Before the checkpoint is read: a second learner on this run must not load or write it.
        lease = LearnerLease(ctx.bus, replica=ctx.replica, out_dir=str(self.out), ttl_s=self.cfg.lease_ttl_s)
        await lease.acquire(wait_s=self.cfg.lease_ttl_s + 5)
        consumer_stop = anyio.Event()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(lease.keep)  # from now on: restoring an engine can outlast the TTL
                resumed = await self._restore(ctx, lease)
                io = self.io
                if self.resolved_config:
                    tg.start_soon(self._publish_config, ctx)
                await tg.start(io.consumer.run, consumer_stop)
                await tg.start(io.rollouts.run)
                if self.trainer is not None and self.cfg.weights_transport == "nccl":
                    from rlvr.learner.weights.collective import CollectiveHost  # torch: not for a dry learner

                    assert self.cfg.collective is not None  # LearnConfig checked it
                    self.collective = CollectiveHost(self.cfg.collective)
                    await tg.start(self.collective.run, ctx.bus)
                tg.start_soon(self._expire_partial_groups)
                tg.start_soon(self._report_progress)
                await self._main(ctx, tg, resumed=resumed)
                consumer_stop.set()
                tg.cancel_scope.cancel()
        finally:
            if self.collective is not None:
                self.collective.close()
            if self._io is not None:
                self._io.metrics.close()
                self._io.history.close()

    async def _publish_config(self, ctx: ActorContext) -> None:
        """The resolved config in KV, for `status` and operators: informational,
        so a full store or an election delays it (retried) but never stops training."""
        async for attempt in retrying("publish_config", until=FOREVER, wait_initial=1.0, wait_max=60.0):
            with attempt:
                await ctx.bus.kv_put(KV_CONFIG, self.resolved_config)

    async def _main(self, ctx: ActorContext, tg: anyio.abc.TaskGroup, resumed: bool) -> None:
        io = self.io
        with anyio.CancelScope() as scope:
            tg.start_soon(_cancel_on, ctx.stop, scope)
            if self.trainer is not None and self.state.version > 0:
                await self._publish_weights()  # rollouts may hold older weights than the checkpoint
            if io.evaluator.enabled and not any(e.label == "before" for e in self.state.eval_history):
                await self._evaluate("before")
            tg.start_soon(io.feeder.run)
            try:
                while self.state.step < self.cfg.steps:
                    await self._one_step()
            except RunCannotLearnError as e:
                await self._stop_cannot_learn(e)
                raise
            io.feeder.paused = True
            if io.evaluator.enabled:
                await self._evaluate("after")
            await self._expire_groups()  # a group past its time is settled by this run, not left held
            await self._checkpoint(final=True)
            await self.dump.close()  # the steps the writer thread still holds
            self._write_summary()
            log.info("learner_done", steps=self.state.step, samples_trained=self.state.samples_trained)
        if scope.cancelled_caught:
            self._write_summary(stopped=True)  # a run stopped early still accounts for what it received
            log.info("learner_stopped", step=self.state.step, note="uncommitted steps will be replayed")

    # --- the step -----------------------------------------------------------------
    async def _next_batch(self) -> list[Group]:
        """Take complete groups, filter them, until ``groups_per_step`` are kept."""
        cfg, feeder = self.cfg, self.io.feeder
        batch: list[Group] = []
        while not self.pacing.step_now(len(batch), self.ready_recv.statistics().current_buffer_used):
            group = await self._next_group()
            result = filter_group(
                group, current_version=self.state.version, max_staleness=cfg.max_staleness,
                dynamic_sampling=cfg.dynamic_sampling, zero_variance_eps=cfg.zero_variance_eps,
                process=cfg.engine.advantage.process if cfg.engine else "off",
            )
            await self._release(self.custody.filtered(group, result))
            members = [sc for _, sc in group.members]
            self._speak(self.watches.signal.group(group, result) + self.failures.group(members))
            self.tally.group(members, flat=result.flat)
            feeder.delay_s = self.failures.backoff_s()
            # The curriculum's pass rate: a failed verification is no evidence, not a 0.
            feeder.done(group.group_id, [sc.verdict.reward for _, sc in group.members if judged(sc)],
                        group.members[0][1].sample.index)
            self.io.history.record(self.state.step, [sc for _, sc in group.members])
            if result.kept:
                batch.append(Group(group.group_id, group.size, result.kept, group.first_seen))
            self.pacing.filtered(bool(result.kept))
            feeder.max_inflight = self.pacing.inflight()
            self.failures.raise_if_cannot_learn()
        self.pacing.stepped()
        return batch

    async def _next_group(self) -> Group:
        """The next complete training group; while none comes, the failure watch's time-based checks
        (its alarm, the stop) every few seconds."""
        while True:
            with anyio.move_on_after(_FAILURE_CHECK_EVERY_S):
                return await self.ready_recv.receive()
            self._speak(self.failures.check())
            self.failures.raise_if_cannot_learn()

    async def _stop_cannot_learn(self, e: RunCannotLearnError) -> None:
        """Every recent sample failed, long enough: commit what was trained and dropped (nothing is lost),
        write the summary that says what failed and how to fix it; the error then ends the role (exit 4)."""
        self.io.feeder.paused = True
        log.error("run_cannot_learn", **msgspec.to_builtins(e.stop))
        async with self._step_lock:
            await self._checkpoint(final=True)
        async with self._summary_lock:
            self._summary_final = True
            self._write_summary(stopped=True, failure=e.stop)

    async def _one_step(self) -> None:
        t_wait = time.monotonic()
        batch = await self._next_batch()
        async with self._step_lock:  # a checkpoint taken while idle (_expire_partial_groups) waits for it
            await self._train_batch(batch, time.monotonic() - t_wait)

    async def _train_batch(self, batch: list[Group], wait_s: float) -> None:
        cfg = self.cfg
        scored = [[sc for _, sc in g.members] for g in batch]
        ids = [sc.sample_id for g in scored for sc in g]
        links = [Link(c) for g in scored for c in span_links(self.custody, g)]
        with tracer().start_as_current_span("learn.step", links=links) as span:
            t0 = time.monotonic()
            engine_metrics = await self.trainer.train(scored) if self.trainer else {}
            train_s = time.monotonic() - t0
            self.state.step += 1
            self.last_step_at = time.monotonic()
            span.set_attribute("rlvr.step", self.state.step)
            await self._release(self.custody.train(ids))
            self.state.samples_trained += len(ids)
            # Batch statistics against the version the batch was filtered under.
            stats = batch_metrics(scored, self.state.version, cfg.alarms.steps.scripts)
            publish_s = 0.0
            if self.trainer and self.state.step % cfg.sync_every == 0:
                publish_s = await self._publish_weights(bump=True)
            record = StepRecord(
                step=self.state.step, policy_version=self.state.version, wait_s=wait_s, train_s=train_s,
                publish_s=publish_s, samples=len(ids), groups=len(batch), samples_trained=self.state.samples_trained,
                batch=stats, engine=engine_metrics, totals=self._run_totals(),
            )
            flat = record.flat()
            for k, v in flat.items():
                span.set_attribute(f"rlvr.{k}", v)
        self.io.metrics.write(flat)
        self.io.metrics.samples(self.state.step, scored)  # the trackers' sample tables
        await self.dump.write(self.state.step, scored)  # handed to its thread: never waited for, never raised
        self._speak(self.watches.steps.step(flat))
        self.last_record = record
        log.info("step", step=record.step, reward_mean=round(stats.get("reward_mean", 0.0), 4), samples=record.samples,
                 wait_s=round(wait_s, 4), train_s=round(train_s, 4), policy_version=record.policy_version)
        if self.state.step % cfg.checkpoint_every == 0:
            await self._checkpoint()
        if cfg.eval.every_steps and self.state.step % cfg.eval.every_steps == 0 and self.state.step < cfg.steps:
            await self._evaluate(f"step{self.state.step}")

    def _run_totals(self) -> dict[str, float]:
        out: dict[str, float] = {k: float(v) for k, v in self.custody.drops.as_dict().items()}
        out["zero_variance_share"] = self.tally.zero_variance_share()  # flat groups, trained or dropped
        out.update({f"outcome_{o}": float(self.custody.outcomes.get(o, 0)) for o in OUTCOMES})
        out["drop_late_duplicate"] = float(self.custody.late_duplicates)
        out.update(self.tally.flat())  # run_episode_end_<reason>, run_tool_errors_<tool>, run_pass_rate_<verifier>
        return out

    # --- custody, checkpoints, weights -----------------------------------------------
    async def on_scored(self, message: ScoredGroup, delivery: Delivery) -> Ack | Hold | Term:
        """One task's scored group, its samples read first when they travel by reference (learner/intake.py):
        custody receives each member under the message's seq (``Custody.receive_group``); the message is
        held while any member is."""
        seq, io = delivery.stream_seq, self.io
        if isinstance(group := await io.intake.admit(message, seq), Term):
            return group
        refused = io.intake.out_of_vocab(group)
        intake = self.custody.receive_group(group.items(), seq, remote_span_context(delivery.trace_context),
                                            group_rank(group), lambda sc: self.assembler.replace(seq, sc),
                                            refuse=refused is not None)
        for aside, why, dead in intake.released:
            if dead:
                io.intake.dead(aside)  # its body stays with its letter
            await io.consumer.release(aside, Term(why, error_type=CONFLICT_ERROR, kind="conflict") if dead else Ack())
        if refused is not None and not intake.held:
            io.intake.dead(seq)
            return refused
        if intake.joined and self.assembler.clock.saw(delivery.stored_at) - self._expired_at >= 1.0:
            await self._expire_groups()  # before these samples join: their own message stays held
        for sc in intake.joined:
            if (complete := self.assembler.add(seq, sc)) is None:
                continue
            if complete.purpose == "eval":
                self.io.evaluator.add(complete)
                await self._release(self.custody.evaluated([m.sample_id for _, m in complete.members]))
            else:
                self.ready_send.send_nowait(complete)
        if intake.held:
            return Hold()
        if intake.put_aside is not None and intake.put_aside[1]:
            io.intake.dead(seq)
            return Term(intake.put_aside[0], error_type=CONFLICT_ERROR, kind="conflict")
        return Ack()

    async def _release(self, seqs: list[int]) -> None:
        """Ack the messages of samples whose fate custody has just decided."""
        for seq in seqs:
            await self.io.consumer.release(seq)

    async def _checkpoint(self, final: bool = False) -> None:
        io = self.io
        self.state.issued = io.feeder.issued
        self.state.drops = dict(self.custody.drops.samples)
        self.state.outcomes = dict(self.custody.outcomes)
        trainer = self.trainer
        if trainer is not None:
            engine_dir = io.store.engine_dir(self.state.commits + 1)
            await self._until_written("engine", lambda: trainer.save(engine_dir))
        ledger_state, entry = self.custody.commit(self.state.step)
        self.state.ledger = ledger_state
        await self._until_written("commit", lambda: anyio.to_thread.run_sync(io.store.commit, self.state, entry))
        await io.intake.committed(ledger_state.floor)  # below the floor every fate is final: their bodies go
        progress = {"step": self.state.step, "version": self.state.version, "floor": ledger_state.floor}
        try:  # for `status` only: the checkpoint on disk is what counts, and it is committed
            await io.ctx.bus.kv_put(KV_LEARNER, json.dumps(progress).encode())
        except Exception as e:
            if not is_transient_bus_fault(e):
                raise
            log.warning("progress_not_published", error=f"{type(e).__name__}: {e}", step=self.state.step)
        log.info("checkpoint", step=self.state.step, floor=ledger_state.floor,
                 committed=len(entry.trained) + len(entry.dropped), final=final)

    async def _until_written(self, part: str, write) -> None:
        """A checkpoint's ``part`` on a full disk: training holds (nothing past the last commit is acked,
        so nothing is lost) and the write is tried again with backoff until the space is back, each
        try an error in the log; any other failure stops the learner as before."""
        async def said(e: BaseException) -> None:
            self.checkpoint_disk_full += 1
            log.error("checkpoint_disk_full", part=part, out_dir=str(self.io.store.root), step=self.state.step,
                      error=f"{type(e).__name__}: {e}",
                      fix="free space there (or point learn.out_dir elsewhere and restart): training holds until "
                          "the checkpoint is written, then goes on by itself")

        async for attempt in retrying(f"checkpoint_{part}", until=FOREVER, on=is_disk_full, wait_initial=1.0,
                                      wait_max=30.0, on_retry=said):
            with attempt:
                await write()

    async def _publish_weights(self, bump: bool = False) -> float:
        assert self.trainer is not None
        t0 = time.monotonic()
        if bump:
            self.state.version += 1
        bus = self.io.ctx.bus
        # A full store or a leader election delays the broadcast; it does not end the run.
        async for attempt in retrying("publish_weights", until=bus.cfg.topology_wait_s, wait_initial=0.5,
                                      version=self.state.version):
            with attempt:
                await self.trainer.publish(bus, self.out / "weights", self.state.version, self.state.step,
                                           self.cfg.weights_transport, self.cfg.keep_weights_every,
                                           collective=self.collective)
        self.io.feeder.policy_version = self.state.version
        return time.monotonic() - t0

    async def _evaluate(self, label: str) -> None:
        io = self.io
        if label != "before" and self.trainer is not None:
            await io.rollouts.wait_for_version(self.state.version, timeout_s=120)
        self.state.eval_rounds += 1
        result = await io.evaluator.run_round(
            self.state.eval_rounds, label, self.state.version, timeout_s=self.cfg.eval.timeout_s, step=self.state.step
        )
        self.state.eval_history.append(result)
        flat = result.flat()
        io.metrics.write({"event": "eval", **flat})
        log.info("eval", **flat)
        self._speak(self.watches.steps.eval_round(label, self.state.step, result.pass_at.get(1)))
        if io.evaluator.last_kept:
            await anyio.to_thread.run_sync(
                write_jsonl, self.out / "evals" / f"{self.state.eval_rounds:03d}-{label}.jsonl", io.evaluator.last_kept
            )

    def _speak(self, raised: list[Alarm]) -> None:
        self.watches.speak(raised, self.io.metrics.write)

    async def _report_progress(self) -> None:
        """While no step comes: a progress record every ``progress_every_s`` (what
        was scored and why it was dropped), the time-based alarms, and the summary
        file, so a run that cannot step is visible and accounted for."""
        every = self.cfg.progress_every_s
        while True:
            await anyio.sleep(every)
            self._speak(self.watches.signal.check())
            if time.monotonic() - self.last_step_at >= every:
                self.io.metrics.write({"event": "progress", "step": self.state.step,
                                       "seconds_since_step": round(time.monotonic() - self.last_step_at, 1),
                                       "groups_seen": self.watches.signal.groups_seen,
                                       "groups_kept": self.watches.signal.groups_kept,
                                       **self.custody.accounting(self.state.samples_trained),
                                       **self._run_totals()})
                summary = self._summary()  # built here: custody changes on this loop only
                async with self._summary_lock:
                    if not self._summary_final:
                        await anyio.to_thread.run_sync(write_json_atomic, self.out / "learner_summary.json", summary)

    async def _expire_partial_groups(self) -> None:
        every = min(30.0, self.cfg.group_timeout_s / 4)
        while True:
            await anyio.sleep(every)
            expired = await self._expire_groups()
            if expired and time.monotonic() - self.last_step_at >= every:
                # No step is coming to checkpoint these drops (the feeder's slots may all be held by
                # groups that can never complete): commit them now, so a stop does not undo them.
                async with self._step_lock:
                    await self._checkpoint()

    async def _expire_groups(self) -> int:
        """Drop as ``partial`` the groups open longer than ``group_timeout_s`` of stream time
        (``StreamClock``): on a timer, as deliveries move the clock, and before the final checkpoint.
        How many groups expired."""
        self._expired_at = self.assembler.clock.now()
        expired = self.assembler.expire(self._expired_at)
        for group in expired:
            await self._release(self.custody.expire(group))
            if group.purpose == "train":
                self.io.feeder.done(group.group_id)
        return len(expired)

    def _write_summary(self, stopped: bool = False, failure: CannotLearn | None = None) -> None:
        """``learner_summary.json``: written at the end, on a stop, and while no step comes."""
        write_json_atomic(self.out / "learner_summary.json", self._summary(stopped, failure))

    def _summary(self, stopped: bool = False, failure: CannotLearn | None = None) -> dict:
        now = time.monotonic()
        summary = {
            "run": self.io.ctx.names.run, "steps": self.state.step, "samples_trained": self.state.samples_trained,
            "policy_version": self.state.version, "stopped_early": stopped,
            # pass@1 before and after, every round, and time_to_gain (the seconds from this learner's start)
            **eval_summary(self.state.eval_history, self.cfg.eval.gain_points, self.started_unix),
            "samples": self.custody.accounting(self.state.samples_trained),
            "drops": self.custody.drop_totals(),
            # Group messages SCORED's retention removed before this learner settled them (Custody.lost):
            # counted as groups, so apart from the sample counts above.
            "retention_gap_groups": self.custody.drops.groups.get("retention_gap", 0),
            # Copies of one group with other content (two verifier replicas' verdicts...): the first stored
            # kept, the other put aside (dead-lettered as `conflict` when it means other work).
            "conflicting_copies": self.custody.conflicts,
            "verifier_outcomes": {o: self.custody.outcomes.get(o, 0) for o in OUTCOMES},
            **self.watches.summary(now),  # alarms holding, each kind's raises and seconds held
            **self.tally.summary(),  # pass_rate by verifier over the run; episode ends, tool errors
            "learner_wall_seconds": time.monotonic() - self.started, "trainer": self.cfg.engine is not None,
        }
        if failure is not None:  # the run stopped because it cannot learn: what failed, how to fix it
            summary["failure"] = msgspec.to_builtins(failure)
        return summary

    def heartbeat(self) -> HeartbeatFields:
        gauges = {k: float(v) for k, v in self.last_record.flat().items()} if self.last_record else {}
        held = self.custody.pending()
        gauges["held"] = float(held)
        counters = {"step": float(self.state.step), "samples_trained": float(self.state.samples_trained),
                    "checkpoint_disk_full": float(self.checkpoint_disk_full),
                    "drop_late_duplicate": float(self.custody.late_duplicates),
                    **{f"drop_{k}": float(v) for k, v in self.custody.drops.samples.items()}}
        if self._io is not None:
            gauges["outstanding_tasks"] = float(len(self._io.feeder.outstanding))
            # Dead letters by kind, poison pills (what `status` prints), and the feeder's retries.
            counters.update({k: float(v) for k, v in self._io.consumer.stats.counters.items()})
            counters.update({f"feeder_{k}": float(v) for k, v in self._io.feeder.counters.items()})
            counters["lease_renewal_failures"] = float(self._io.lease.renewal_failures)
        return HeartbeatFields(
            policy_version=self.state.version, in_flight=held, counters=counters, gauges=gauges,
            alerts=self.watches.alerts(),
        )


class _LearnerIO(msgspec.Struct):
    """The learner's parts that talk to the bus or the disk, made together by ``_restore``."""

    ctx: ActorContext
    store: CheckpointStore
    lease: LearnerLease
    feeder: Feeder
    consumer: Consumer[ScoredGroup]
    metrics: MetricsWriter
    history: PromptHistory
    evaluator: Evaluator
    rollouts: RolloutVersions
    intake: ScoredIntake


class RetentionGapError(RuntimeError):
    """SCORED no longer holds samples the learner has not settled."""


class LearnerNotStartedError(RuntimeError):
    """A part made by ``_restore`` was used before ``run`` made it."""


async def _cancel_on(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


