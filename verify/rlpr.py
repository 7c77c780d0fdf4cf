"""``rlpr``: the policy's own probability of the reference answer as the reward (RLPR).

Yu et al. 2025, "RLPR: Extrapolating RLVR to General Domains without
Verifiers": the reward is the mean per-token probability of the reference
answer given the prompt and the completion's reasoning (its answer replaced by
the reference); debiased, minus the same probability given the prompt alone,
clipped to [0, 1] (``rlvr.protocol.rlpr`` has the formula). The rollout
measures both with its policy right after generating (``rlvr.rollout.rlpr``)
and sends them in ``Sample.measures``; this verifier only turns them into a
verdict, so the verify role still loads no model and no torch.

Outcomes: ``ok`` with the reward (a fraction: partial credit reaches the
learner unchanged); ``parse_error`` when the completion had no answer to
replace; ``error`` when the measures are missing (a multi-turn episode, or a
rollout that predates them), never a silent 0. In a ``composite`` it is one
part among others (RLPR's paper also adds it to a rule-based reward).
"""

from __future__ import annotations

import time

from rlvr.protocol.rlpr import RlprParams
from rlvr.protocol.samples import Verdict
from rlvr.verify.registry import Verifier, VerifyContext


def _rlpr(completion: str, p: RlprParams, ctx: VerifyContext) -> Verdict:
    started = time.perf_counter()
    m = ctx.measures
    if "rlpr_found" not in m:
        why = "a multi-turn episode" if ctx.episode is not None else "the rollout did not measure it"
        return Verdict(0.0, "error", "rlpr", detail=f"no RLPR measure on this sample ({why})")
    if not m["rlpr_found"] or "rlpr_prob" not in m:
        return Verdict(0.0, "parse_error", "rlpr", detail=f"no answer ({p.answer}) to replace by the reference")
    prob, base = m["rlpr_prob"], m.get("rlpr_prob_base", 0.0)
    reward = min(1.0, max(0.0, prob - base)) if p.debias else prob
    return Verdict(reward, "ok", "rlpr", components={"rlpr_prob": prob, "rlpr_prob_base": base},
                   latency_s=time.perf_counter() - started,
                   detail=f"p(reference | reasoning) {prob:.4f}, p(reference | prompt) {base:.4f}")


RLPR = Verifier("rlpr", RlprParams, _rlpr)
