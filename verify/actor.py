"""The verifier actor: samples in, Scored out.

It pulls from the shared ``verify`` consumer (every replica binds the same
durable, so replicas split the work and a message goes to one at a time),
scores each sample in the killable worker pool, publishes ``Scored`` with
``Nats-Msg-Id = task_id/index#<meaning digest>.<verdict digest>`` (``scored_msg_id``)
and only then acks. A replica killed while holding a message lets it be
redelivered after ``ack_wait``; the republished Scored, scored alike, has the
same id, so it is stored once. A sample published again under its id with
other content, or scored with another verdict by another replica, gets
another id, so the learner sees both and keeps one by content, whichever
replica scored each and whichever was stored first.

Outcomes are data: a timeout is ``outcome="timeout"`` in the Scored message
(counted apart from wrong answers), never a missing reward. A spec naming an
unknown verifier or bad parameters is dead-lettered with the reason: no
retry can fix it. Plug-in verifiers are imported here once, at start-up,
from this role's own ``[verify] plugins``; a message naming any other import
path is dead-lettered, and nothing it names is ever imported. A prompt the
rollout rejected is scored ``parse_error`` without running a verifier.
"""

from __future__ import annotations

from collections import Counter

import anyio

from rlvr.actors.consume import Consumer, Delivery, Forward, Term
from rlvr.actors.logs import get_logger
from rlvr.actors.meters import RateMeter
from rlvr.actors.runtime import ActorContext, HeartbeatFields
from rlvr.actors.tracing import hop_span
from rlvr.protocol import Sample, Scored, Verdict, decode
from rlvr.protocol.samples import ENV_FAILURES, sample_meaning, scored_msg_id
from rlvr.protocol.validate import MessageInvalidError, check_sample, check_verdict
from rlvr.verify.config import VerifyConfig
from rlvr.verify.pool import INLINE_VERIFIERS, VerifierPool
from rlvr.sandbox.base import SandboxUnavailableError
from rlvr.sandbox.levels import choose_level
from rlvr.sandbox.levels import gauges as sandbox_gauges
from rlvr.verify.registry import VerifierSpecError, context_for_sample, load_plugins

log = get_logger("rlvr.verify")


class VerifyActor:
    role = "verify"

    def __init__(self, cfg: VerifyConfig) -> None:
        self.cfg = cfg
        # Before the bus: a plug-in that cannot be imported stops the replica with its name.
        load_plugins(cfg.plugins)
        if cfg.plugins:
            log.info("verifier_plugins_loaded", plugins=list(cfg.plugins))
        self.consumer: Consumer[Sample] | None = None
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
                decode=lambda data: decode(data, Sample),
                handle=self.handle,
                concurrency=self.cfg.concurrency,
                task_id_of=lambda s: s.task_id,
                validate=check_sample,  # before any verifier sees it: dead-lettered with the field
                meaning=sample_meaning,  # a regenerated copy of a slot is a duplicate, not a conflict
                keep_alive_every_s=self.cfg.in_progress_every_s,
                forward=self.forward,
            )
            await self.consumer.run(ctx.stop)

    async def handle(self, sample: Sample, delivery: Delivery) -> Term | None:
        """A sample ``forward`` left to a lane: scored in the pool, then published."""
        assert self.pool is not None
        with hop_span("verify.score", delivery.trace_context, self._span_attributes(sample)) as span:
            try:
                verdict = self._verdict_now(sample)
                if verdict is None:
                    # Kept alive meanwhile by the consumer's ticker (keep_alive_every_s).
                    verdict = await self.pool.verify(
                        sample.verifier, sample.text, context_for_sample(sample, self.sandbox)
                    )
            except VerifierSpecError as e:  # raised before dispatch: dead-lettered, never retried
                self.outcomes["bad_spec"] += 1
                return Term(str(e), "VerifierSpecError")
            scored = self._scored(sample, verdict, span)
            if isinstance(scored, Term):
                return scored
            await self.ctx.bus.publish(self.ctx.names.scored, scored, msg_id=scored_msg_id(sample, scored.verdict))
        self._count(verdict)
        return None

    def forward(self, sample: Sample, delivery: Delivery) -> Forward | Term | None:
        """The fast path, run by the consumer as it pulls: a verdict known at
        once (``INLINE_VERIFIERS``, a rejected prompt, a failed environment)
        becomes a ``Scored`` that the consumer publishes with the pull's other
        results, acking the sample once it is stored. None: the sample needs
        the pool, and goes to ``handle``."""
        try:
            verdict = self._verdict_now(sample)
        except VerifierSpecError as e:
            self.outcomes["bad_spec"] += 1
            return Term(str(e), "VerifierSpecError")
        if verdict is None:
            return None
        with hop_span("verify.score", delivery.trace_context, self._span_attributes(sample)) as span:
            scored = self._scored(sample, verdict, span)
            if isinstance(scored, Term):
                return scored
            headers = self.ctx.bus.headers_for(scored_msg_id(sample, scored.verdict))  # inside the span: the output continues it
        self._count(verdict)
        return Forward(self.ctx.names.scored, scored, headers)

    def _verdict_now(self, sample: Sample) -> Verdict | None:
        """The verdict when no worker is needed; None when the pool must score it."""
        if sample.finish_reason == "rejected":
            return Verdict(0.0, "parse_error", sample.verifier.name, detail="prompt rejected by the rollout")
        if sample.episode is not None and sample.episode.end_reason in ENV_FAILURES:
            # The environment failed, not the policy: an error, never a 0 that reads as a wrong answer.
            e = sample.episode
            return Verdict(0.0, "error", sample.verifier.name,
                           detail=f"episode ended {e.end_reason} ({e.environment}): {e.detail}"[:2000])
        assert self.pool is not None
        if sample.verifier.name not in INLINE_VERIFIERS:
            return None
        return self.pool.verify_now(sample.verifier, sample.text, context_for_sample(sample, self.sandbox))

    def _scored(self, sample: Sample, verdict: Verdict, span) -> Scored | Term:
        try:
            check_verdict(verdict)  # a NaN reward must never reach the learner
        except MessageInvalidError as e:
            self.outcomes["invalid_verdict"] += 1
            return Term(f"verifier {sample.verifier.name!r} returned an unusable verdict: {e.reason}",
                        "MessageInvalidError", kind="invalid")
        if span.is_recording():  # an unsampled trajectory pays nothing more
            span.set_attributes({"rlvr.outcome": verdict.outcome, "rlvr.reward": verdict.reward})
        return Scored(sample=sample, verdict=verdict, replica=self.ctx.replica)

    @staticmethod
    def _span_attributes(sample: Sample) -> dict[str, str]:
        return {"rlvr.sample_id": sample.sample_id, "rlvr.verifier": sample.verifier.name}

    def _count(self, verdict: Verdict) -> None:
        self.outcomes[verdict.outcome] += 1
        self.rate.add(1)

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


