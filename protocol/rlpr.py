"""RLPR's contract between the rollout (which measures) and the verifier (which rewards).

RLPR (Yu et al. 2025, "RLPR: Extrapolating RLVR to General Domains without
Verifiers") rewards a completion with the policy's own probability of the
reference answer: the completion's answer is replaced by the reference, and
the reward is the mean per-token probability of the reference's tokens given
the prompt and the completion's reasoning before it. Debiased, it subtracts
the probability of the reference given the prompt alone, and clips to [0, 1]:

    r = mean_i pi(y*_i | x, z, y*_<i),   r_base = mean_i pi(y*_i | x, y*_<i),   reward = clip(r - r_base, 0, 1)

Only the rollout has the policy, so it measures both right after generating
(same weights, ``rlpr_policy_version``) and carries them in
``Sample.measures``; the ``rlpr`` verifier turns them into the reward. Both
read the task's ``VerifierSpec`` params with ``RlprParams`` and find the
answer with ``answer_span``, so they cannot disagree on where it is.
"""

from __future__ import annotations

from typing import Literal

from msgspec import Struct

AnswerAt = Literal["boxed", "answer_tag", "last_line", "whole"]
MEASURES = ("rlpr_prob", "rlpr_prob_base", "rlpr_found", "rlpr_policy_version")


class RlprParams(Struct, frozen=True, forbid_unknown_fields=True):
    # The reference answer (the dataset's "{gold}").
    reference: str
    # Where the completion's answer is, to be replaced by the reference: the last \boxed{...}'s
    # content, the last <answer>...</answer>'s, the last non-empty line, or the whole completion.
    answer: AnswerAt = "boxed"
    # Subtract the reference's probability given the prompt alone, and clip to [0, 1].
    debias: bool = True


def answer_span(text: str, at: AnswerAt) -> tuple[int, int] | None:
    """(start, end) of the answer in ``text``, or None when there is none."""
    if at == "whole":
        return (0, len(text))
    if at == "last_line":
        stripped = text.rstrip()
        start = stripped.rfind("\n") + 1
        return (start, len(stripped)) if stripped[start:].strip() else None
    if at == "answer_tag":
        start = text.rfind("<answer>")
        end = text.find("</answer>", start + 8) if start >= 0 else -1
        return (start + 8, end) if start >= 0 and end >= 0 else None
    start = text.rfind("\\boxed")
    brace = text.find("{", start) if start >= 0 else -1
    if brace < 0 or text[start + 6:brace].strip():
        return None
    depth = 0
    for i in range(brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return (brace + 1, i)
    return None


def rlpr_params(spec_name: str, params: dict) -> dict | None:
    """The params of the RLPR part of a task's verifier spec (itself, or a composite's part), or None."""
    if spec_name == "rlpr":
        return params
    if spec_name == "composite":
        for part in params.get("parts", []) if isinstance(params.get("parts"), list) else []:
            if isinstance(part, dict) and part.get("name") == "rlpr":
                return part.get("params", {})
    return None


__all__ = ["MEASURES", "AnswerAt", "RlprParams", "answer_span", "rlpr_params"]
