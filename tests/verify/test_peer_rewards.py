"""Peers' published reward functions, unchanged: open-r1's (tests/data/peer_rewards/open_r1_rewards.py),
verl's GSM8K scorer (verl_gsm8k.py) and every form TRL's GRPOTrainer docs show (trl_doc_forms.py).

Before issue 33 the project demanded ``prompts`` of a TRL function and ``data_source`` of a verl
one, so open-r1's ``accuracy_reward(completions, solution, **kwargs)``, TRL's own
``reward_len(completions, **kwargs)`` and verl's ``compute_score(solution_str, ground_truth, ...)``
were all refused. Each is audited here on right and wrong answers through the same worker pool a
run uses (`rlvr-actor audit`); tests/cli/test_up_peer_rewards.py trains with them under `up`.
"""

from __future__ import annotations

import json

import pytest

from rlvr.cli.main import main
from rlvr.protocol import VerifierSpec
from rlvr.protocol.tasks import ChatMessage
from rlvr.verify.registry import VerifyContext, load_plugins, resolve

R1 = "tests.data.peer_rewards.open_r1_rewards"
MINE = "tests.data.peer_rewards.my_peer_rewards"
VERL = "tests.data.peer_rewards.verl_gsm8k"
TRL = "tests.data.peer_rewards.trl_doc_forms"
CHAT = [{"role": "user", "content": "What is 1/2 of 1?"}]
THINK = "<think>\nhalf of one\n</think>\n<answer>\n$\\boxed{\\frac{1}{2}}$\n</answer>"

# (plug-in, prompt, record, gold, [(response, judged right)])
CASES = [
    (f"{R1}:accuracy_reward", CHAT, {"solution": "$\\frac{1}{2}$"}, None,
     [("So it is $\\boxed{\\frac{1}{2}}$.", True), ("So it is $\\boxed{3}$.", False)]),
    (f"{R1}:format_reward", CHAT, {}, None, [(THINK, True), ("1/2", False)]),
    (f"{R1}:tag_count_reward", CHAT, {}, None, [(THINK, True), ("1/2", False)]),
    (f"{R1}:reasoning_steps_reward", CHAT, {}, None,
     [("Step 1: one.\nStep 2: half.\nStep 3: so 1/2.", True), ("1/2", False)]),
    (f"{MINE}:cosine_scaled_reward", CHAT, {"solution": "$\\frac{1}{2}$"}, None,
     [("$\\boxed{\\frac{1}{2}}$", True), ("$\\boxed{5}$", False)]),
    (f"{VERL}:compute_score", "Natalia sold 48 clips in April and half as many in May. How many in all?", {}, "72",
     [("48 + 24 = 72\n#### 72", True), ("48 + 24 = 70\n#### 70", False), ("seventy-two", False)]),
    (f"{TRL}:format_reward_func", CHAT, {}, None,
     [("<think>half</think><answer>1/2</answer>", True), ("1/2", False)]),
    (f"{TRL}:reward_func", "2+3?", {"ground_truth": "5"}, None, [("\\boxed{5}", True), ("\\boxed{6}", False)]),
    (f"{TRL}:math_reward_func", "2+3?", {"ground_truth": "5", "task": "math"}, None, [("5", True), ("6", False)]),
    (f"{TRL}:async_reward_func", "6*7?", {}, None, [("42", True), ("41", False)]),
    (f"{TRL}:scheduled_reward", "?", {}, None, [("the answer", True), ("no", False)]),
    (f"{TRL}:logging_reward", "?", {}, None, [("short", True), ("long " * 20, False)]),
    (f"{TRL}:prompt_aware_reward", "a prompt", {}, None, [("short", True, [9, 10]), ("long", False, list(range(40)))]),
]


@pytest.mark.parametrize("plugin, prompt, record, gold, answers", CASES, ids=[c[0].split(":")[1] for c in CASES])
def test_each_peer_function_is_audited_unchanged(plugin, prompt, record, gold, answers, tmp_path, capsys):
    cases = tmp_path / "cases.jsonl"
    cases.write_text("".join(
        json.dumps({"id": i, "response": text, "label": right, "prompt": prompt, "record": record,
                    **({"gold": gold} if gold is not None else {}), "completion_ids": ids[0] if ids else []}) + "\n"
        for i, (text, right, *ids) in enumerate(answers)))
    out = tmp_path / "verdicts.jsonl"
    code = main(["audit", "--verifier", plugin, "--input", str(cases), "--output", str(out), "--json",
                 "--pool-size", "1"])
    captured = capsys.readouterr()
    summary = json.loads(captured.out.splitlines()[-1])
    assert code == 0, (summary, captured.err)
    assert summary["agreement"] == 1.0 and summary["outcomes"].get("error", 0) == 0, summary


def _verdict(path: str, completion: str, gold=None, **ctx):
    load_plugins([path])
    return resolve(VerifierSpec(path, {"gold": gold} if gold is not None else {}))(completion, VerifyContext(**ctx))


def test_a_multi_task_function_that_does_not_apply_is_not_a_zero():
    v = _verdict(f"{TRL}:math_reward_func", "5", record={"ground_truth": "5", "task": "code"})
    assert v.outcome == "parse_error" and "not applicable" in v.detail


def test_a_metric_logged_by_a_trl_function_becomes_a_component():
    v = _verdict(f"{TRL}:logging_reward", "short")
    assert v.components == {"short_share": 1.0} and v.reward == 1.0


def test_a_required_column_the_record_lacks_is_named_with_the_columns_there_are():
    v = _verdict(f"{R1}:accuracy_reward", "x", prompt=[ChatMessage("user", "?")], record={"answer": "1"})
    assert v.outcome == "error" and "'solution'" in v.detail and "answer" in v.detail
    bare = _verdict(f"{R1}:accuracy_reward", "x", prompt=[ChatMessage("user", "?")])
    assert "no column reached it" in bare.detail


def test_a_group_relative_function_sees_a_batch_of_one():
    """open-r1's len_reward compares lengths within its batch: called once per completion here,
    its batch is one completion and it returns 0.0 (docs/rewards.md says so)."""
    v = _verdict(f"{R1}:len_reward", "$\\boxed{1}$", prompt=[ChatMessage("user", "?")], record={"solution": "$1$"})
    assert (v.reward, v.outcome) == (0.0, "wrong")


def test_verl_s_per_dataset_scorer_gets_only_what_it_declares():
    # compute_score(solution_str, ground_truth, method='strict', format_score=0., score=1.): no data_source.
    assert _verdict(f"{VERL}:compute_score", "#### 72", gold="72").reward == 1.0
    assert _verdict(f"{VERL}:compute_score", "#### 72", gold="72", record={"data_source": "openai/gsm8k"}).reward == 1.0
