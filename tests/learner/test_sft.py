"""The SFT stage's step and data (learner/train/sft.py, learner/data/sft_pairs.py) and rejection
sampling's filters (learner/data/rejection.py): real DeepSpeed on CPU, a tiny model built here."""

from __future__ import annotations

import json

import pytest

from rlvr.learner.data.rejection import RejectionFilters, read_dumps, select, write_kept
from rlvr.learner.data.sft_pairs import PairsFileError, SFTPair, pairs_from_dataset, read_pairs, write_pairs
from rlvr.learner.config import ArithmeticDataset


def _record(index: int, text: str, ids: list[int], *, outcome="ok", accuracy=1.0, finish="stop", sid=None) -> dict:
    return {"sample_id": sid or f"t{index}/{text}", "dataset": "arithmetic", "index": index, "prompt": "1+2=",
            "prompt_ids": [3, 4, 5, 6], "completion_ids": ids, "mask": [1] * len(ids), "text": text,
            "finish_reason": finish,
            "verdict": {"reward": accuracy + 0.2, "outcome": outcome, "components": {"accuracy": accuracy}}}


def test_select_counts_each_filter_in_order_and_keeps_the_policys_tokens():
    records = [
        _record(0, "3", [5]),                       # kept
        _record(0, "3", [5], sid="dup"),            # duplicate of the first
        _record(0, "4", [6], accuracy=0.0),         # rejected: format reward alone is not acceptance
        _record(1, "x", [7], outcome="timeout"),    # rejected: a failed verification
        _record(1, "33333", [5, 5, 5, 5, 5]),       # too long
        _record(1, "3", [5], finish="length"),      # truncated
        _record(1, "Привет", [8]),                  # language mixing
        _record(2, "3", [5]), _record(2, "03", [2, 5]), _record(2, "003", [2, 2, 5]),  # third is over k=2
    ]
    kept, counts = select(records, RejectionFilters(max_per_prompt=2, max_tokens=4, foreign_share_max=0.5))
    assert counts == {"sampled": 10, "rejected": 2, "too_short": 0, "too_long": 1, "truncated": 1,
                      "language_mixing": 1, "duplicate": 1, "over_per_prompt": 1, "kept": 3, "prompts_kept": 2}
    assert [p.completion_ids for p in kept] == [[5], [5], [2, 5]]
    assert kept[0].prompt_ids == [3, 4, 5, 6] and kept[0].source["index"] == 0


def test_filters_that_contradict_each_other_name_the_keys():
    with pytest.raises(ValueError, match="max_tokens .* min_tokens"):
        RejectionFilters(min_tokens=5, max_tokens=2)


def test_kept_set_round_trips_as_pairs_with_its_counts(tmp_path):
    kept, counts = select([_record(0, "3", [5])], RejectionFilters())
    path = write_kept(tmp_path, kept, counts)
    assert read_pairs(path) == kept
    assert json.loads((tmp_path / "kept_counts.json").read_text())["kept"] == 1


def test_read_dumps_says_which_step_file_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="step-000001.jsonl"):
        read_dumps(tmp_path, 1)


@pytest.mark.parametrize("line, says", [
    ('{"prompt": "1+1="}', "completion"),
    ('{"prompt": "1+1=", "completion": "2", "promt": 1}', None),
    ('{"prompt": "1+1=", "completion": "2", "prompt_ids": [1]}', "prompt_ids and completion_ids"),
    ('{"prompt": 5, "completion": "2"}', "prompt"),
    ('not json', "line 1"),
])
def test_a_bad_pairs_line_is_an_error_naming_its_line_and_key(tmp_path, line, says):
    path = tmp_path / "p.jsonl"
    path.write_text(line + "\n")
    if says is None:  # an extra key is carried along, not an error: pairs files come from many tools
        assert read_pairs(path)[0].completion == "2"
        return
    with pytest.raises(PairsFileError, match=says):
        read_pairs(path)


def test_the_dataset_as_pairs_is_its_prompts_with_their_answers():
    pairs = pairs_from_dataset(ArithmeticDataset(holdout=10), seed=0, limit=5)
    assert len(pairs) == 5 and all(p.prompt.endswith("=") and p.completion.lstrip("-").isdigit() for p in pairs)


def test_sft_trains_the_completion_and_exports_a_whole_model(tmp_path):
    from transformers import AutoModelForCausalLM

    from rlvr.learner.engine_config import OptimizerConfig, TrainEngineConfig
    from rlvr.learner.example.arith_model import build_arith_model
    from rlvr.learner.train.sft import SFTParams, run_sft

    model = build_arith_model(tmp_path / "init", hidden=32, layers=1, heads=1)
    pairs = [SFTPair(prompt=f"{a}+1=", completion=str(a + 1)) for a in range(10)]
    write_pairs(tmp_path / "pairs.jsonl", pairs)
    cfg = TrainEngineConfig(model_path=str(model), zero_stage=0, optimizer=OptimizerConfig(lr=1e-3),
                            micro_batch_tokens=4096, pad_token_id=0)
    info = run_sft(cfg, read_pairs(tmp_path / "pairs.jsonl"), SFTParams(steps=40, batch=10, lr=3e-3),
                   tmp_path / "out", log=lambda s: None)
    assert info["loss_last"] < 0.5 * info["loss_first"], info
    out = tmp_path / "out" / "model"
    assert {"config.json", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    AutoModelForCausalLM.from_pretrained(out)  # loads as is: the next stage's start
    assert json.loads((tmp_path / "out" / "sft.json").read_text())["steps"] == 40
