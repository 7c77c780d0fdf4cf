"""No silent data: a record without its gold answer, a prompt stored as JSON text, and the layout
the loader chose are each said at load time, never turned into a wrong answer or raw JSON."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from structlog.testing import capture_logs

from rlvr.learner.data.dataset_config import JsonlDataset, reads_gold
from rlvr.learner.data.datasets import DatasetError, load_splits
from rlvr.protocol import VerifierSpec
from rlvr.protocol.tasks import ChatMessage


def _jsonl(tmp_path, rows, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


ROWS = [{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2=", "answer": None}, {"prompt": "3+3="},
        {"prompt": "4+4=", "answer": 8}]


def test_a_null_or_absent_gold_is_an_error_naming_the_record_and_the_field(tmp_path):
    path = _jsonl(tmp_path, ROWS)
    with pytest.raises(DatasetError, match=r"data.jsonl record 1 has None in 'answer' \(learn.dataset.answer_field; "
                                           r"the default of the plain layout.*no gold answer, and the verifier "
                                           r"'math' reads one.*on_missing_gold"):
        load_splits(JsonlDataset(path=path), seed=0)
    path = _jsonl(tmp_path, [ROWS[0], ROWS[2]])
    with pytest.raises(DatasetError, match=r"record 1 has no field 'answer' \(learn.dataset.answer_field"):
        load_splits(JsonlDataset(path=path), seed=0)


def test_records_without_gold_are_skipped_and_counted_when_asked(tmp_path):
    cfg = JsonlDataset(path=_jsonl(tmp_path, ROWS), on_missing_gold="skip", verifier="exact")
    with capture_logs() as logs:
        train = load_splits(cfg, seed=0).train
    assert [(s.index, s.verifier.params) for s in train] == [(0, {"gold": "2"}), (3, {"gold": "8"})]
    (skip,) = [e for e in logs if e["event"] == "dataset_records_skipped"]
    assert (skip["skipped"], skip["of"], skip["first"], skip["log_level"]) == (2, 4, [1, 2], "warning")
    every = JsonlDataset(path=_jsonl(tmp_path, ROWS[1:3], "none.jsonl"), on_missing_gold="skip")
    with pytest.raises(DatasetError, match="every record \\(2\\) lacks a gold answer in 'answer'"):
        load_splits(every, seed=0)


def test_a_verl_parquet_with_a_null_ground_truth_is_refused_even_for_a_reward_function(tmp_path):
    rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"{i}+{i}?"}],
             "reward_model": {"style": "rule", "ground_truth": None if i == 2 else str(2 * i)}} for i in range(4)]
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(DatasetError, match=r"record 2 has None in 'reward_model.ground_truth' .*the default of "
                                           r"verl's layout"):
        load_splits(JsonlDataset(path=str(path), verifier="mine:compute_score"), seed=0)


def test_pandas_nan_is_a_missing_gold(tmp_path):
    path = tmp_path / "nan.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "a", "answer": 1.0}, {"prompt": "b", "answer": math.nan}]), path)
    with pytest.raises(DatasetError, match="record 1 has nan in 'answer'"):
        load_splits(JsonlDataset(path=str(path)), seed=0)


def test_only_verifiers_that_read_an_answer_need_one(tmp_path):
    path = _jsonl(tmp_path, ROWS)
    # A TRL function (a plug-in) that never reads an answer needs no answer field ...
    specs = load_splits(JsonlDataset(path=path, verifier="my_rewards:reward_len"), seed=0).train
    assert [s.verifier.params for s in specs] == [{"gold": "2"}, {}, {}, {"gold": "8"}]
    # ... unless the answer field is named: then it reads one.
    with pytest.raises(DatasetError, match="record 1 has None in 'answer'"):
        load_splits(JsonlDataset(path=path, verifier="my_rewards:accuracy", answer_field="answer"), seed=0)
    # Built-ins that score without a gold, and a spec that does not ask for "{gold}".
    assert len(load_splits(JsonlDataset(path=path, verifier="env"), seed=0).train) == 4
    fmt = JsonlDataset(path=path, verifier_spec=VerifierSpec("format", {"style": "boxed"}))
    assert [s.verifier.params for s in load_splits(fmt, seed=0).train] == [{"style": "boxed"}] * 4
    parts = {"parts": [{"name": "format"}, {"name": "m:score", "params": {"gold": "{gold}"}}]}
    assert reads_gold(JsonlDataset(path=path, verifier_spec=VerifierSpec("composite", parts)), verl=False)
    assert reads_gold(JsonlDataset(path=path, verifier="code", tests_field="tests"), verl=False)
    assert not reads_gold(JsonlDataset(path=path, verifier="m:score"), verl=False)
    assert reads_gold(JsonlDataset(path=path, verifier="m:score"), verl=True)


def test_null_tests_are_a_missing_gold_too(tmp_path):
    path = _jsonl(tmp_path, [{"prompt": "p", "tests": json.dumps([{"input": "1", "output": "1"}])},
                             {"prompt": "q", "tests": None}])
    with pytest.raises(DatasetError, match=r"record 1 has None in 'tests' \(learn.dataset.tests_field;"):
        load_splits(JsonlDataset(path=path, verifier="code", tests_field="tests"), seed=0)


def test_a_prompt_stored_as_json_text_of_messages_is_read_as_messages_and_said_once(tmp_path):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    rows = [{"prompt": json.dumps(messages), "answer": "1"}, {"prompt": json.dumps(messages[1:]), "answer": "2"},
            {"prompt": "[1, 2, 3] sorted is?", "answer": "3"}]
    with capture_logs() as logs:
        train = load_splits(JsonlDataset(path=_jsonl(tmp_path, rows)), seed=0).train
    assert train[0].prompt == [ChatMessage("system", "Be brief."), ChatMessage("user", "hi")]
    assert train[1].prompt == [ChatMessage("user", "hi")]
    assert train[2].prompt == "[1, 2, 3] sorted is?"  # text that is not a message list stays text
    (said,) = [e for e in logs if e["event"] == "dataset_json_prompts"]
    assert said["prompts"] == 2


@pytest.mark.parametrize("prompt, says", [
    ('[{"role": "user", "content": "hi"}', "looks like the JSON text of chat messages but is not JSON"),
    (str([{"role": "user", "content": "hi"}]), "Python's repr of a list, not JSON"),
    ('[{"role": "robot", "content": "hi"}]', "role in"),
    ('[{"content": 3}]', "is not a \\{role, content\\} message"),
])
def test_malformed_json_messages_are_refused_naming_the_record(tmp_path, prompt, says):
    path = _jsonl(tmp_path, [{"prompt": "ok", "answer": "1"}, {"prompt": prompt, "answer": "1"}])
    with pytest.raises(DatasetError, match=f"record 1 field 'prompt'.*{says}"):
        load_splits(JsonlDataset(path=path), seed=0)


def test_the_layout_chosen_is_said_with_its_reason(tmp_path):
    rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "1+1?"}],
             "extra_info": {"answer": "2"}}]
    path = tmp_path / "verl_without_reward_model.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with capture_logs() as logs, pytest.raises(DatasetError, match=(
            r"has no field 'answer' \(learn.dataset.answer_field; the default of the plain layout: the first "
            r"record has data_source, extra_info but no `reward_model` column, so verl's layout")):
        load_splits(JsonlDataset(path=str(path)), seed=0)
    (said,) = [e for e in logs if e["event"] == "dataset_layout"]
    assert said["layout"] == "plain" and "no `reward_model` column" in said["why"]
    with capture_logs() as logs:
        load_splits(JsonlDataset(path=_jsonl(tmp_path, ROWS[:1])), seed=0)
    assert "none of verl's columns" in logs[0]["why"] and logs[0]["answer_field"] == "answer"
    with pytest.raises(DatasetError, match="the default of the verl layout, named by learn.dataset.layout"):
        load_splits(JsonlDataset(path=_jsonl(tmp_path, ROWS[:1]), layout="verl"), seed=0)


def test_a_builtin_set_whose_record_has_no_answer_is_refused(tmp_path):
    import gzip

    from rlvr.learner.data.dataset_config import BuiltinDataset

    (tmp_path / "gsm8k").mkdir()
    rows = [{"question": "1+1?", "answer": "1+1=2\n#### 2"}, {"question": "2+2?", "answer": "2+2=4"}]
    with gzip.open(tmp_path / "gsm8k" / "test.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetError, match="record 1: its 'answer' has no '#### <answer>' line"):
        load_splits(BuiltinDataset(name="gsm8k", split="test", root=str(tmp_path)), seed=0)
    (tmp_path / "math500").mkdir()
    (tmp_path / "math500" / "test.jsonl").write_text(json.dumps({"problem": "p", "solution": "no box", "level": 1}))
    with pytest.raises(DatasetError, match="record 0: no 'answer' and no \\\\boxed"):
        load_splits(BuiltinDataset(name="math500", root=str(tmp_path)), seed=0)
