"""A user's JSONL of LeetCode / LiveCodeBench functional problems becomes
training tasks whose code verifier spec resolves with typed params."""

from __future__ import annotations

import json

import pytest

from rlvr.learner.config import JsonlDataset
from rlvr.learner.data.datasets import DatasetError, load_splits
from rlvr.verify.registry import resolve

LCB_RECORD = {
    "question_content": "Given an array nums and a target, return the indices of the two numbers adding up to it.",
    "fn_name": "twoSum",
    # LiveCodeBench keeps its cases as a JSON-encoded string: one JSON argument per input line.
    "public_test_cases": json.dumps([
        {"input": "[2, 7, 11, 15]\n9", "output": "[0, 1]", "testtype": "functional"},
        {"input": "[3, 2, 4]\n6", "output": "[1, 2]", "testtype": "functional"},
    ]),
}


def test_lcb_records_become_code_tasks_with_fn_name(tmp_path):
    path = tmp_path / "lcb.jsonl"
    path.write_text(json.dumps(LCB_RECORD) + "\n")
    cfg = JsonlDataset(path=str(path), prompt_field="question_content", verifier="code",
                       tests_field="public_test_cases", params_fields={"fn_name": "fn_name"})
    task = load_splits(cfg, seed=0).train[0]
    assert task.verifier.params["fn_name"] == "twoSum" and len(task.verifier.params["tests"]) == 2
    bound = resolve(task.verifier)  # typed CodeParams: fn_name and functional cases agree
    assert bound.name == "code"


def test_a_missing_params_field_names_the_field(tmp_path):
    path = tmp_path / "lcb.jsonl"
    path.write_text(json.dumps({k: v for k, v in LCB_RECORD.items() if k != "fn_name"}) + "\n")
    cfg = JsonlDataset(path=str(path), prompt_field="question_content", verifier="code",
                       tests_field="public_test_cases", params_fields={"fn_name": "fn_name"})
    with pytest.raises(DatasetError, match="params_fields.fn_name"):
        load_splits(cfg, seed=0)
