"""Three reward functions for the same task, one of each kind rlvr-actor takes (docs/your-task.md).

The task: arithmetic word problems whose answer is an integer, asked for in \\boxed{}.
Each function gives 1.0 for the right boxed answer, 0.0 otherwise, so the
three can be audited against the same labelled cases (cases.jsonl).

- ``compute_score``: verl's custom reward signature, as a verl user has it.
- ``boxed_answer_reward``: TRL's ``reward_funcs`` signature, as a TRL user has it.
- ``BOXED``: an rlvr-actor ``Verifier``: typed parameters and a full Verdict.

Make the module importable by the verify role (installed, or on PYTHONPATH)
and list the one you use in ``[verify] plugins``.
"""

from __future__ import annotations

import re

from msgspec import Struct

from rlvr.protocol import Verdict
from rlvr.verify.registry import Verifier, VerifyContext

_BOXED = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}")


def last_boxed_int(text: str) -> str | None:
    found = _BOXED.findall(text)
    return found[-1] if found else None


# --- verl: compute_score(data_source, solution_str, ground_truth, extra_info=None) -----------------
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    answer = last_boxed_int(solution_str)
    return {"score": 1.0 if answer == str(ground_truth).strip() else 0.0, "boxed": float(answer is not None)}


# --- TRL: reward_func(prompts, completions, **kwargs) -> list[float | None] ----------------------------
def boxed_answer_reward(prompts, completions, ground_truth, **kwargs):
    rewards = []
    for completion, gold in zip(completions, ground_truth):
        text = completion[-1]["content"] if isinstance(completion, list) else completion
        rewards.append(1.0 if last_boxed_int(text) == str(gold).strip() else 0.0)
    return rewards


# --- an rlvr-actor Verifier ---------------------------------------------------------------------------
class BoxedParams(Struct, frozen=True, forbid_unknown_fields=True):
    gold: str  # the dataset's answer (answer_field), passed as params.gold


def score_boxed(completion: str, params: BoxedParams, ctx: VerifyContext) -> Verdict:
    answer = last_boxed_int(completion)
    if answer is None:
        return Verdict(0.0, "parse_error", "boxed", detail="no \\boxed{integer} in the completion")
    ok = answer == params.gold.strip()
    return Verdict(1.0 if ok else 0.0, "ok" if ok else "wrong", "boxed", extracted=answer)


BOXED = Verifier("boxed", BoxedParams, score_boxed)
