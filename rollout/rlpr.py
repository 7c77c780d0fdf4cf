"""RLPR in the rollout: the policy's probability of the reference answer, measured right after generation.

For a task whose verifier is ``rlpr`` (or a composite with an ``rlpr`` part,
``rlvr.protocol.rlpr``), each completion's answer (``answer_span``) is
replaced by the reference and the engine scores the reference's tokens
twice under the weights that just generated (``Engine.score``):

- after the prompt and the completion's reasoning (the text before the
  answer, the ``\\boxed{`` included), and
- after the prompt alone, for the debiasing term,

each the mean per-token probability (at temperature 1: the policy itself, not
the sampled distribution). They travel in ``Sample.measures`` as
``rlpr_prob`` / ``rlpr_prob_base``, with ``rlpr_found`` (0 when the
completion had no answer to replace) and ``rlpr_policy_version``.

The reasoning is re-encoded from its text to score it: this is a reward's
input, never a training sequence, so the token-in/token-out rule of the
training data is not at stake. Multi-turn episodes are not measured (their
``rlpr`` verdict says so).
"""

from __future__ import annotations

import math

import msgspec

from rlvr.protocol import Task
from rlvr.protocol.rlpr import RlprParams, answer_span, rlpr_params


def requested(task: Task) -> RlprParams | None:
    """The task's RLPR params, when its verifier asks for the measure."""
    raw = rlpr_params(task.verifier.name, task.verifier.params)
    if raw is None or task.env is not None:
        return None
    try:
        return msgspec.convert(raw, RlprParams)
    except msgspec.ValidationError:
        return None  # the verifier names the bad params in its verdict


async def measure(engine, task: Task, prompt_ids: list[int], texts: list[str]) -> list[dict[str, float]]:
    """``Sample.measures`` for each completion text of one task."""
    params = requested(task)
    if params is None:
        return [{} for _ in texts]
    codec = engine.chat_codec()
    reference = codec.encode(params.reference)
    if not reference:
        return [{"rlpr_found": 0.0} for _ in texts]
    rows: list[tuple[list[int], list[int]]] = [(list(prompt_ids), reference)]  # row 0: the prompt alone
    found: list[bool] = []
    for text in texts:
        span = answer_span(text, params.answer)
        found.append(span is not None)
        if span is not None:
            rows.append((list(prompt_ids) + codec.encode(text[: span[0]]), reference))
    logprobs, version = await engine.score(rows)
    mean_p = [sum(math.exp(x) for x in lp) / len(lp) for lp in logprobs]
    base, scored = mean_p[0], iter(mean_p[1:])
    out = []
    for ok in found:
        m = {"rlpr_found": 1.0 if ok else 0.0, "rlpr_prob_base": base, "rlpr_policy_version": float(version)}
        if ok:
            m["rlpr_prob"] = next(scored)
        out.append(m)
    return out
