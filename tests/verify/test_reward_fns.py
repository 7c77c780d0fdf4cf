"""verl- and TRL-style reward functions become verifiers: called as their frameworks call them, and
whatever they do (return a dict, None, NaN, a string, raise, hang) gets an outcome that says so."""

from __future__ import annotations

import math
import time

import anyio
import pytest

from rlvr.protocol import VerifierSpec
from rlvr.protocol.tasks import ChatMessage
from rlvr.verify.pool import VerifierPool
from rlvr.verify.registry import VerifierPluginError, VerifyContext, load_plugins, resolve
from rlvr.verify.reward_fns import adapt, convention_of

SEEN: list[dict] = []


# --- functions as users write them ----------------------------------------------------------------
def verl_dict(data_source, solution_str, ground_truth, extra_info=None):
    SEEN.append({"data_source": data_source, "solution_str": solution_str, "ground_truth": ground_truth,
                 "extra_info": extra_info})
    right = solution_str.strip().endswith(str(ground_truth))
    return {"score": 1.0 if right else -0.5, "acc": right, "length": len(solution_str), "note": "text is skipped"}


def verl_float(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return 0.25


def verl_nan(data_source, solution_str, ground_truth, extra_info=None):
    return math.nan


def verl_text(data_source, solution_str, ground_truth, extra_info=None):
    return "correct"


def verl_raises(data_source, solution_str, ground_truth, extra_info=None):
    raise KeyError("answer")


def verl_hangs(data_source, solution_str, ground_truth, extra_info=None):
    while True:
        time.sleep(1)


def trl_reward(prompts, completions, ground_truth, **kwargs):
    SEEN.append({"prompts": prompts, "completions": completions, "ground_truth": ground_truth, **kwargs})
    return [1.0 if c[-1]["content"].strip() == g else 0.0 for c, g in zip(completions, ground_truth)]


def trl_none(prompts, completions, **kwargs):
    return [None for _ in completions]


def trl_wrong_length(prompts, completions, **kwargs):
    return [1.0, 1.0]


def not_a_reward(x, y):
    return 1.0


def trl_logs_extra(completions, ground_truth, log_extra=None, log_metric=None, **kwargs):
    """TRL 1.x's docs, Example 6: the extracted answers go to log_extra."""
    extracted = [c.strip() for c in completions]
    rewards = [1.0 if e == g else 0.0 for e, g in zip(extracted, ground_truth)]
    if log_extra:
        log_extra("extracted_answer", extracted)
    if log_metric:
        log_metric("accuracy", sum(rewards) / len(rewards))
    return rewards


def _verdict(fn, completion="x", gold="5", **ctx):
    bound = resolve_fn(fn, gold)
    return bound(completion, VerifyContext(**ctx))


def resolve_fn(fn, gold="5"):
    path = f"{__name__}:{fn.__name__}"
    load_plugins([path])
    return resolve(VerifierSpec(path, {"gold": gold}))


def test_signatures_are_recognised_by_their_parameter_names():
    assert convention_of(verl_dict) == convention_of(verl_float) == "verl"
    assert convention_of(trl_reward) == convention_of(trl_none) == "trl"
    assert convention_of(not_a_reward) is None and convention_of(print) is None
    with pytest.raises(VerifierPluginError, match="these name no convention.*reward_function.fn, 'verl' | "):
        adapt(not_a_reward, "m:not_a_reward")
    with pytest.raises(VerifierPluginError, match="has no attribute 'nope'"):
        load_plugins([f"{__name__}:nope"])


def test_a_verl_function_is_called_with_keywords_as_verl_calls_it():
    SEEN.clear()
    ctx = {"record": {"data_source": "openai/gsm8k", "extra_info": {"index": 7}}, "dataset": "file"}
    v = _verdict(verl_dict, "so it is 5", gold="5", **ctx)
    assert SEEN == [{"data_source": "openai/gsm8k", "solution_str": "so it is 5", "ground_truth": "5",
                     "extra_info": {"index": 7}}]
    # The dict's score is the reward, its other numbers components; "acc" decides ok.
    assert (v.reward, v.outcome, v.components) == (1.0, "ok", {"acc": 1.0, "length": 10.0})
    assert v.detail == "note='text is skipped'"  # what is not a number is kept, not dropped
    wrong = _verdict(verl_dict, "so it is 6", gold="5", dataset="file")
    assert (wrong.reward, wrong.outcome) == (-0.5, "wrong")
    assert SEEN[-1]["data_source"] == "file" and SEEN[-1]["extra_info"] is None  # no record: the dataset's name


def test_a_positive_reward_is_ok_and_partial_credit_reaches_the_verdict_unrounded():
    v = _verdict(verl_float)
    assert (v.reward, v.outcome) == (0.25, "ok")


@pytest.mark.parametrize("fn, says", [
    (verl_nan, "returned nan, not a finite reward"),
    (verl_text, "returned 'correct' (str), not a number"),
    (verl_raises, "verl_raises raised KeyError: 'answer'"),
    (trl_wrong_length, "not a list of one reward per completion"),
])
def test_a_function_that_fails_is_an_error_outcome_never_a_silent_zero(fn, says):
    v = _verdict(fn)
    assert v.outcome == "error" and says in v.detail, v


def test_a_trl_function_gets_one_completion_and_the_record_s_columns_as_lists():
    SEEN.clear()
    prompt = [ChatMessage("system", "be brief"), ChatMessage("user", "2+3?")]
    v = _verdict(trl_reward, " 5 ", prompt=prompt, record={"ground_truth": "5", "level": 2},
                 completion_ids=[11, 12])
    assert (v.reward, v.outcome) == (1.0, "ok")
    (call,) = SEEN
    assert call["prompts"] == [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+3?"}]]
    assert call["completions"] == [[{"role": "assistant", "content": " 5 "}]]
    assert call["ground_truth"] == ["5"] and call["level"] == [2] and call["completion_ids"] == [[11, 12]]


def test_a_trl_string_prompt_gets_string_completions_and_none_is_not_applicable():
    SEEN.clear()
    _verdict(trl_reward, "5", prompt="2+3=", record={"ground_truth": "5"})
    assert SEEN[0]["prompts"] == ["2+3="] and SEEN[0]["completions"] == ["5"]
    v = _verdict(trl_none)
    assert (v.reward, v.outcome) == (0.0, "parse_error") and "not applicable" in v.detail


def test_in_the_pool_a_hanging_function_times_out_and_a_raising_one_is_an_error():
    path = f"{__name__}:verl_hangs"
    load_plugins([path, f"{__name__}:verl_raises"])

    async def main():
        async with VerifierPool(2, timeout_s=1.0, warm=()) as pool:
            hung = await pool.verify(VerifierSpec(path, {"gold": "1"}), "x")
            raised = await pool.verify(VerifierSpec(f"{__name__}:verl_raises", {"gold": "1"}), "x")
            return hung, raised

    hung, raised = anyio.run(main)
    assert hung.outcome == "timeout" and raised.outcome == "error" and "KeyError" in raised.detail


def test_what_a_trl_function_logs_with_log_extra_is_kept_in_the_verdict():
    v = _verdict(trl_logs_extra, " 5 ", record={"ground_truth": "5"})
    assert (v.reward, v.components, v.detail) == (1.0, {"accuracy": 1.0}, "extracted_answer='5'")
