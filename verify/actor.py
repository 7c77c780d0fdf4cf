"""The verifier actor: samples in, Scored out.

It pulls from the shared ``verify`` consumer (every replica binds the same
durable, so replicas split the work and a message goes to one at a time),
scores each sample in the killable worker pool, publishes ``Scored`` with
``Nats-Msg-Id = task_id/index`` and only then acks. A replica killed while
holding a message lets it be redelivered after ``ack_wait``; the republished
Scored has the same id, so it is stored once.

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

from rlvr.actors.consume import Consumer, Delivery, Term
from rlvr.actors.logs import get_logger
from rlvr.actors.meters import RateMeter
from rlvr.actors.runtime import ActorContext, HeartbeatFields
from rlvr.actors.tracing import hop_span
from rlvr.protocol import Sample, Scored, Verdict, decode
from rlvr.protocol.samples import ENV_FAILURES, sample_meaning
from rlvr.protocol.validate import MessageInvalidError, check_sample, check_verdict
from rlvr.verify.config import VerifyConfig
from rlvr.verify.pool import VerifierPool
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
            )
            await self.consumer.run(ctx.stop)

    async def handle(self, sample: Sample, delivery: Delivery) -> Term | None:
        assert self.pool is not None
        with hop_span(
            "verify.score",
            delivery.trace_context,
            {"rlvr.sample_id": sample.sample_id, "rlvr.verifier": sample.verifier.name},
        ) as span:
            if sample.finish_reason == "rejected":
                verdict = Verdict(0.0, "parse_error", sample.verifier.name, detail="prompt rejected by the rollout")
            elif sample.episode is not None and sample.episode.end_reason in ENV_FAILURES:
                # The environment failed, not the policy: an error, never a 0 that reads as a wrong answer.
                e = sample.episode
                verdict = Verdict(0.0, "error", sample.verifier.name,
                                  detail=f"episode ended {e.end_reason} ({e.environment}): {e.detail}"[:2000])
            else:
                try:
                    # Kept alive meanwhile by the consumer's ticker (keep_alive_every_s).
                    verdict = await self.pool.verify(
                        sample.verifier, sample.text, context_for_sample(sample, self.sandbox)
                    )
                except VerifierSpecError as e:  # raised before dispatch: dead-lettered, never retried
                    self.outcomes["bad_spec"] += 1
                    return Term(str(e), "VerifierSpecError")
            try:
                check_verdict(verdict)  # a NaN reward must never reach the learner
            except MessageInvalidError as e:
                self.outcomes["invalid_verdict"] += 1
                return Term(f"verifier {sample.verifier.name!r} returned an unusable verdict: {e.reason}",
                            "MessageInvalidError", kind="invalid")
            if span.is_recording():  # an unsampled trajectory pays nothing more
                span.set_attributes({"rlvr.outcome": verdict.outcome, "rlvr.reward": verdict.reward})
            scored = Scored(sample=sample, verdict=verdict, replica=self.ctx.replica)
            await self.ctx.bus.publish(self.ctx.names.scored, scored, msg_id=sample.sample_id)
        self.outcomes[verdict.outcome] += 1
        self.rate.add(1)
        return None

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


