"""The verifier actor: sample groups in, scored groups out.

It pulls from the shared ``verify`` consumer (every replica binds the same
durable, so replicas split the work and a message goes to one at a time).
A message is one task's whole group (``SampleGroup``, protocol/groups.py);
each sample is scored (in the killable worker pool, all of a group's at once,
or here and now when the verdict is known at once), and the group goes out as
one ``ScoredGroup`` with ``Nats-Msg-Id = <task_id>/group#<meaning>.<verdicts>``
(``scored_group_msg_id``); only then is the input acked. A replica killed
while holding a group lets it be redelivered after ``ack_wait``; the group
scored again alike has the same id, so it is stored once. A group published
again under its id with other content, or scored with another verdict by
another replica, gets another id, so the learner sees both and keeps one by
content.

Outcomes are data: a timeout is ``outcome="timeout"`` in the verdict
(counted apart from wrong answers), never a missing reward. A spec naming an
unknown verifier or bad parameters is dead-lettered with the reason (the
whole group: one task's samples share their spec): no retry can fix it.
Plug-in verifiers are imported here once, at start-up, from this role's own
``[verify] plugins``; a message naming any other import path is
dead-lettered, and nothing it names is ever imported. A prompt the rollout
rejected is scored ``parse_error`` without running a verifier. A group too
large for one message comes by reference (``body``): its samples are read
from the run's bodies bucket and validated as an inline group's before any
verifier sees them, and its ScoredGroup goes out with the same reference
(actors/bodies.py).
"""

from __future__ import annotations

from collections import Counter

import anyio

from rlvr.actors import bodies
from rlvr.actors.bodies import BodyRefusedError, GroupTooLargeError, publish_group
from rlvr.actors.consume import Consumer, Delivery, Forward, Term
from rlvr.actors.logs import get_logger
from rlvr.actors.meters import RateMeter
from rlvr.actors.runtime import ActorContext, HeartbeatFields
from rlvr.actors.tracing import hop_span
from rlvr.protocol import Sample, SampleGroup, ScoredGroup, Verdict, decode
from rlvr.protocol.groups import group_meaning, scored_group_msg_id
from rlvr.protocol.samples import ENV_FAILURES
from rlvr.protocol.validate import MessageInvalidError, check_sample_group, check_verdict
from rlvr.verify.config import VerifyConfig
from rlvr.verify.inline import INLINE_CANDIDATES
from rlvr.verify.pool import VerifierPool
from rlvr.sandbox.base import SandboxUnavailableError
from rlvr.sandbox.levels import choose_level
from rlvr.sandbox.levels import gauges as sandbox_gauges
from rlvr.verify.registry import VerifierSpecError, context_for_sample, load_plugins, resolve

log = get_logger("rlvr.verify")


class VerifyActor:
    role = "verify"

    def __init__(self, cfg: VerifyConfig) -> None:
        self.cfg = cfg
        # Before the bus: a plug-in that cannot be imported stops the replica with its name.
        load_plugins(cfg.plugins)
        if cfg.plugins:
            log.info("verifier_plugins_loaded", plugins=list(cfg.plugins))
        self.consumer: Consumer[SampleGroup] | None = None
        self.pool: VerifierPool | None = None
        self.outcomes: Counter[str] = Counter()
        self.rate = RateMeter()
        self.sandbox = cfg.sandbox  # the level resolved at start (auto -> bwrap or docker)
        self.sandbox_level = ""  # no gauge set until the level is known

    async def run(self, ctx: ActorContext) -> None:
        self.ctx = ctx
        await anyio.to_thread.run_sync(self._choose_sandbox)
        async with VerifierPool.from_config(self.cfg) as pool:
            self.pool = pool
            self.consumer = Consumer(
                ctx.bus,
                ctx.bus.consumer_def("verify"),
                stage="verify",
                decode=lambda data: decode(data, SampleGroup),
                handle=self.handle,
                concurrency=self.cfg.concurrency,
                task_id_of=lambda g: g.task_id,
                validate=check_sample_group,  # before any verifier sees it: dead-lettered with the field
                # A group generated again is a duplicate, not a conflict. A referenced group's samples
                # are read later (``handle``): two referenced copies of one task are duplicates.
                meaning=lambda g: group_meaning(g.samples),
                keep_alive_every_s=self.cfg.in_progress_every_s,
                forward=self.forward,
            )
            await self.consumer.run(ctx.stop)

    async def handle(self, group: SampleGroup, delivery: Delivery) -> Term | None:
        """A group ``forward`` left to a lane: its samples read first when they travel by reference
        (actors/bodies.py: a reference to nothing or to other bytes is dead-lettered with the field,
        a bus fault raised for the consumer to retry), scored in the pool at once, then published
        with the same reference: the verifier never writes a body."""
        assert self.pool is not None
        stored = group.body
        if stored is not None:
            try:
                group = await bodies.resolve(self.ctx.bus, group)
            except (BodyRefusedError, MessageInvalidError) as e:
                self.outcomes["body_refused"] += 1
                return Term(e.reason, type(e).__name__, kind="invalid")
        pool, samples = self.pool, group.samples
        verdicts: list[Verdict | None] = [None] * len(samples)
        with hop_span("verify.score", delivery.trace_context, self._span_attributes(group)) as span:
            try:
                _check_specs(samples)  # a bad spec raises here, not inside the task group below
                pending = []
                for i, sample in enumerate(samples):
                    verdicts[i] = self._verdict_now(sample)
                    if verdicts[i] is None:
                        pending.append(i)

                async def one(i: int) -> None:
                    # Kept alive meanwhile by the consumer's ticker (keep_alive_every_s).
                    s = samples[i]
                    verdicts[i] = await pool.verify(s.verifier, s.text, context_for_sample(s, self.sandbox))

                async with anyio.create_task_group() as tg:
                    for i in pending:
                        tg.start_soon(one, i)
            except VerifierSpecError as e:  # raised before dispatch: dead-lettered, never retried
                self.outcomes["bad_spec"] += 1
                return Term(str(e), "VerifierSpecError")
            scored = self._scored(group, verdicts, span)  # type: ignore[arg-type]
            if isinstance(scored, Term):
                return scored
            try:  # the id from the samples themselves, whichever way they travel
                await publish_group(self.ctx.bus, self.ctx.names.scored, scored, scored_group_msg_id(scored),
                                    stored=stored)
            except GroupTooLargeError as e:  # verdicts larger than the samples: no retry makes them fit
                self.outcomes["group_too_large"] += 1
                return Term(e.reason, "GroupTooLargeError")
        self._count(scored.verdicts)
        return None

    def forward(self, group: SampleGroup, delivery: Delivery) -> Forward | Term | None:
        """The fast path, run by the consumer as it pulls: a group whose every
        verdict is known at once (``rlvr.verify.inline``, a rejected prompt, a
        failed environment) becomes a ``ScoredGroup`` that the consumer publishes
        with the pull's other results, acking the input once it is stored. None:
        some sample needs the pool, and the group goes to ``handle``, as does a group whose
        samples travel by reference (reading them is I/O)."""
        if group.body is not None:
            return None
        try:
            verdicts = [self._verdict_now(s) for s in group.samples]
        except VerifierSpecError as e:
            self.outcomes["bad_spec"] += 1
            return Term(str(e), "VerifierSpecError")
        if any(v is None for v in verdicts):
            return None
        with hop_span("verify.score", delivery.trace_context, self._span_attributes(group)) as span:
            scored = self._scored(group, verdicts, span)  # type: ignore[arg-type]
            if isinstance(scored, Term):
                return scored
            headers = self.ctx.bus.headers_for(scored_group_msg_id(scored))  # inside the span: the output continues it
        self._count(scored.verdicts)
        return Forward(self.ctx.names.scored, scored, headers)

    def _verdict_now(self, sample: Sample) -> Verdict | None:
        """The verdict when no worker is needed; None when the pool must score it."""
        if sample.finish_reason == "rejected":  # its text says why (the rollout's limit and the numbers)
            why = f": {sample.text[:500]}" if sample.text else ""
            return Verdict(0.0, "parse_error", sample.verifier.name, detail=f"prompt rejected by the rollout{why}")
        if sample.episode is not None and sample.episode.end_reason in ENV_FAILURES:
            # The environment failed, not the policy: an error, never a 0 that reads as a wrong answer.
            # The detail's end is kept: a traceback's last line names what failed.
            e = sample.episode
            head = f"episode ended {e.end_reason} ({e.environment}): "
            return Verdict(0.0, "error", sample.verifier.name, detail=head + e.detail[-(2000 - len(head)):])
        assert self.pool is not None
        if sample.verifier.name not in INLINE_CANDIDATES:
            return None
        return self.pool.verify_now(sample.verifier, sample.text, context_for_sample(sample, self.sandbox))

    def _scored(self, group: SampleGroup, verdicts: list[Verdict], span) -> ScoredGroup | Term:
        for sample, verdict in zip(group.samples, verdicts, strict=True):
            try:
                check_verdict(verdict)  # a NaN reward must never reach the learner
            except MessageInvalidError as e:
                self.outcomes["invalid_verdict"] += 1
                return Term(f"verifier {sample.verifier.name!r} returned an unusable verdict for "
                            f"{sample.sample_id}: {e.reason}", "MessageInvalidError", kind="invalid")
        if span.is_recording():  # an unsampled trajectory pays nothing more
            span.set_attributes({"rlvr.outcomes": ",".join(v.outcome for v in verdicts),
                                 "rlvr.reward_mean": sum(v.reward for v in verdicts) / len(verdicts)})
        return ScoredGroup(group.run, group.task_id, group.samples, verdicts, replica=self.ctx.replica)

    @staticmethod
    def _span_attributes(group: SampleGroup) -> dict[str, str]:
        return {"rlvr.task_id": group.task_id, "rlvr.verifier": group.samples[0].verifier.name if group.samples else ""}

    def _count(self, verdicts: list[Verdict]) -> None:
        for v in verdicts:
            self.outcomes[v.outcome] += 1
        self.rate.add(len(verdicts))

    def _choose_sandbox(self) -> None:
        """Probe the sandbox level once, say which and why; workers then use
        that concrete level (``auto`` is never re-decided per worker)."""
        try:
            self.sandbox, why = choose_level(self.cfg.sandbox)
            self.sandbox_level = self.sandbox.level
            log.info("sandbox_level", level=self.sandbox_level, configured=self.cfg.sandbox.level, why=why)
        except SandboxUnavailableError as e:
            # Math and format still work; every code task scores sandbox_error.
            log.error("sandbox_unavailable", configured=self.cfg.sandbox.level, why=str(e))

    def heartbeat(self) -> HeartbeatFields:
        counters: dict[str, float] = dict(self.consumer.stats.counters) if self.consumer else {}
        counters.update({f"outcome_{k}": v for k, v in self.outcomes.items()})
        gauges = {"samples_per_s": self.rate.rate(), **sandbox_gauges(self.sandbox_level)}
        if self.pool is not None:
            gauges.update(self.pool.stats())
        return HeartbeatFields(
            in_flight=self.consumer.stats.in_flight if self.consumer else 0,
            counters=counters,
            gauges=gauges,
        )


def _check_specs(samples: list[Sample]) -> None:
    """Resolve each distinct verifier spec of a group once (one task's samples share theirs): raises
    ``VerifierSpecError`` naming an unknown verifier or a bad parameter."""
    seen: list = []
    for s in samples:
        if s.verifier not in seen:
            seen.append(s.verifier)
            resolve(s.verifier)
