"""RLPR's measure (rollout/rlpr.py): the engine's probability of the reference answer equals a forward pass."""

from __future__ import annotations

import math
import time

import pytest

from rlvr.protocol import SamplingParams, Task, VerifierSpec
from rlvr.protocol.rlpr import answer_span
from rlvr.rollout import rlpr

TOL = 0.01


def _task(verifier: VerifierSpec) -> Task:
    return Task(run="t", task_id="t-r", dataset="d", index=0, prompt="Add.", verifier=verifier, n=2,
                sampling=SamplingParams(max_tokens=4), policy_version=0, created_at=time.time())


def test_the_measure_is_the_mean_probability_of_the_reference_after_the_reasoning_and_after_the_prompt(
        loop, engine, weight_dirs, versions, reference):
    v = next(versions)
    loop.run(engine.load_weights(weight_dirs["base"], v))
    task = _task(VerifierSpec("rlpr", {"reference": "42", "answer": "boxed"}))
    codec = engine.chat_codec()
    prompt_ids = codec.encode("Add 40 and 2.")
    texts = ["we add, so \\boxed{41}", "no answer here"]
    m = loop.run(rlpr.measure(engine, task, prompt_ids, texts))
    ref_ids = codec.encode("42")

    def mean_p(prefix: list[int]) -> float:
        lp = reference.logprobs(weight_dirs["base"], prefix, ref_ids, 1.0)
        return sum(math.exp(x) for x in lp) / len(lp)

    start, _ = answer_span(texts[0], "boxed")
    assert m[0]["rlpr_found"] == 1.0 and m[0]["rlpr_policy_version"] == v
    assert abs(m[0]["rlpr_prob"] - mean_p(prompt_ids + codec.encode(texts[0][:start]))) < TOL
    assert abs(m[0]["rlpr_prob_base"] - mean_p(prompt_ids)) < TOL
    assert m[1]["rlpr_found"] == 0.0 and "rlpr_prob" not in m[1]  # nothing to replace: the verdict says so


def test_only_tasks_whose_verifier_asks_are_measured():
    assert rlpr.requested(_task(VerifierSpec("exact", {"gold": "1"}))) is None
    comp = VerifierSpec("composite", {"parts": [{"name": "math", "params": {"gold": "1"}},
                                                {"name": "rlpr", "params": {"reference": "1", "answer": "last_line"}}]})
    assert rlpr.requested(_task(comp)).answer == "last_line"


@pytest.mark.parametrize("text, at, span", [
    ("so \\boxed{\\frac{1}{2}} done", "boxed", "\\frac{1}{2}"),
    ("<answer>Paris</answer>", "answer_tag", "Paris"),
    ("line one\nthe answer: 7\n\n", "last_line", "the answer: 7"),
    ("anything", "whole", "anything"),
])
def test_answer_spans(text, at, span):
    a, b = answer_span(text, at)
    assert text[a:b] == span


@pytest.mark.parametrize("text, at", [("\\boxed{unclosed", "boxed"), ("no tags", "answer_tag"), ("\n\n", "last_line"),
                                      ("\\boxedx{1}", "boxed")])
def test_no_answer_span(text, at):
    assert answer_span(text, at) is None
