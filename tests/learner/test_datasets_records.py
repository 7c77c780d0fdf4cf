"""Datasets as the ecosystem ships them: verl's parquet layout, Hugging Face datasets saved to disk
or read from local files, dotted fields, chat prompts for every kind, records that reach the reward."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlvr.learner.data.dataset_config import BuiltinDataset, HFDataset, JsonlDataset
from rlvr.learner.data.datasets import DatasetError, load_splits
from rlvr.protocol.tasks import ChatMessage
from tests.conftest import REPO

VERL_ROWS = [
    {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "system", "content": "Reason, then answer."},
                   {"role": "user", "content": f"What is {i} + {i}?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(2 * i)},
        "extra_info": {"split": "train", "index": i, "answer": f"{i} + {i} = #### {2 * i}"},
    }
    for i in range(10)
]


@pytest.fixture
def verl_parquet(tmp_path):
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(VERL_ROWS), path)  # as verl's data_preprocess scripts write it
    return path


@pytest.mark.parametrize("kind", [JsonlDataset, HFDataset])
def test_a_verl_parquet_reads_as_it_is(verl_parquet, kind):
    (spec, *_) = load_splits(kind(path=str(verl_parquet), verifier="mine:compute_score"), seed=0).train
    assert spec.prompt == [ChatMessage("system", "Reason, then answer."), ChatMessage("user", "What is 0 + 0?")]
    assert spec.verifier.name == "mine:compute_score" and spec.verifier.params == {"gold": "0"}
    assert spec.dataset == "openai/gsm8k"  # data_source names the dataset
    assert spec.record == {"data_source": "openai/gsm8k", "ability": "math",
                           "reward_model": {"style": "rule", "ground_truth": "0"},
                           "extra_info": {"split": "train", "index": 0, "answer": "0 + 0 = #### 0"}}


def test_the_layout_can_be_named_and_fields_are_dotted_paths(tmp_path):
    rows = [{"q": {"text": "2+2?"}, "meta": {"gold": {"value": 4}}, "keep": 1, "drop": 2}]
    path = tmp_path / "nested.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    cfg = JsonlDataset(path=str(path), layout="plain", prompt_field="q.text", answer_field="meta.gold.value",
                       record_fields=["keep", "meta.gold.value"], prompt_style="chat", system_prompt="Be brief.")
    (spec,) = load_splits(cfg, seed=0).train
    assert spec.prompt == [ChatMessage("system", "Be brief."), ChatMessage("user", "2+2?")]
    assert spec.verifier.params == {"gold": "4"}  # numbers reach the verifier as their text
    assert spec.record == {"keep": 1, "meta.gold.value": 4}


def test_a_dataset_saved_with_save_to_disk_reads_its_splits(tmp_path):
    import datasets

    flat = [{"prompt": f"{i}*2=", "solution": str(2 * i), "difficulty": i % 3} for i in range(8)]
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(flat[:6]),
                               "test": datasets.Dataset.from_list(flat[6:])})
    dd.save_to_disk(str(tmp_path / "saved"))
    cfg = HFDataset(path=str(tmp_path / "saved"), answer_field="solution", heldout_split="test",
                    prompt_style="chat")
    splits = load_splits(cfg, seed=0)
    assert [len(splits.train), len(splits.heldout)] == [6, 2]
    assert splits.heldout[0].prompt == [ChatMessage("user", "6*2=")] and splits.heldout[0].verifier.params["gold"] == "12"
    assert splits.train[1].record == {"solution": "2", "difficulty": 1}  # TRL's keyword columns
    with pytest.raises(DatasetError, match="no split 'validation' \\(it has: train, test\\)"):
        load_splits(HFDataset(path=str(tmp_path / "saved"), split="validation"), seed=0)


def test_local_files_read_through_datasets_with_a_glob(tmp_path):
    for part in range(2):
        (tmp_path / f"part{part}.jsonl").write_text(
            "\n".join(json.dumps({"prompt": f"{part}-{i}", "answer": i}) for i in range(3)))
    splits = load_splits(HFDataset(path=str(tmp_path / "part*.jsonl"), holdout=2), seed=0)
    assert len(splits.train) == 4 and len(splits.heldout) == 2


@pytest.mark.parametrize("cfg, says", [
    (dict(prompt_field="question"), "has no field 'question' (learn.dataset.prompt_field"),
    (dict(answer_field="reward_model.truth"), "has no field 'reward_model.truth' (learn.dataset.answer_field"),
    (dict(layout="plain"), "has no field 'answer' (learn.dataset.answer_field"),
])
def test_a_missing_field_is_an_error_naming_the_key(verl_parquet, cfg, says):
    with pytest.raises(DatasetError, match=says.replace("(", "\\(")):
        load_splits(JsonlDataset(path=str(verl_parquet), **cfg), seed=0)


def test_a_prompt_that_is_not_messages_or_text_and_a_record_too_deep_to_travel_are_refused(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": [{"role": "robot", "content": "hi"}], "answer": "1"}))
    with pytest.raises(DatasetError, match="role in"):
        load_splits(JsonlDataset(path=str(path)), seed=0)
    deep: object = 0
    for _ in range(40):
        deep = [deep]
    path.write_text(json.dumps({"prompt": "hi", "answer": "1", "deep": deep}))
    with pytest.raises(DatasetError, match="record 0: record nests deeper than"):
        load_splits(JsonlDataset(path=str(path)), seed=0)


def test_builtin_sets_take_chat_prompts_and_a_system_prompt():
    cfg = BuiltinDataset(name="gsm8k", split="test", root=str(REPO / "data"), prompt_style="chat",
                         system_prompt="You are a careful tutor.")
    spec = load_splits(cfg, seed=0).train[0]
    assert [m.role for m in spec.prompt] == ["system", "user"]
    assert spec.prompt[1].content.startswith("Solve the problem step by step")
