"""``random``: the random-reward control, a Bernoulli(p) reward that ignores the completion.

Part of an RLVR gain can come from training itself rather than from the
reward: Shao et al. 2025 ("Spurious Rewards: Rethinking Training Signals in
RLVR") report Qwen2.5-Math-7B gaining 21.4 points on MATH-500 with random
rewards against 29.1 with true ones. Running this verifier next to a real
run, at the real reward's early pass rate, says how much of a gain the
reward itself bought (docs/rewards.md has the one-line recipe).

The reward is 1 with probability ``p``, drawn from a generator seeded by
``seed`` and the sample's id, so a redelivered or replayed sample gets the
same reward, and two runs with the same seed the same rewards. Outcome
``ok`` for 1, ``wrong`` for 0: never ``parse_error``, so no alarm mistakes
the control for a broken verifier.
"""

from __future__ import annotations

import hashlib
from typing import Annotated

from msgspec import Meta, Struct

from rlvr.protocol.samples import Verdict
from rlvr.verify.registry import Verifier, VerifyContext


class RandomParams(Struct, frozen=True, forbid_unknown_fields=True):
    # Probability of reward 1 (set it to the real reward's early pass rate).
    p: Annotated[float, Meta(ge=0, le=1)] = 0.5
    # Seeds the draws together with each sample's id.
    seed: int = 0


def draw(sample_id: str, p: RandomParams) -> bool:
    """A uniform draw in [0, 1) from (seed, sample id), below p: the same every time."""
    digest = hashlib.sha256(f"{p.seed}:{sample_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < p.p


def _random(completion: str, p: RandomParams, ctx: VerifyContext) -> Verdict:
    if not ctx.sample_id:
        return Verdict(0.0, "error", "random", detail="the random control needs the sample's id (none given)")
    hit = draw(ctx.sample_id, p)
    return Verdict(1.0 if hit else 0.0, "ok" if hit else "wrong", "random",
                   components={"accuracy": 1.0 if hit else 0.0}, detail=f"random control, p={p.p}")


RANDOM = Verifier("random", RandomParams, _random)
