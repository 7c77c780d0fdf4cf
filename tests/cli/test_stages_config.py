"""``[[stages]]`` in a run config (cli/stages/config.py), the stage record (cli/stages/record.py)
and the stage table: parsing, merging each stage's overrides into [learn], errors that name the key."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from rlvr.cli.run_config import ConfigError, load_config
from rlvr.cli.stages.config import RejectionSFTStage, RLStage, SFTStage, merge, stage_learn, stage_name
from rlvr.cli.stages.record import StagePlanChangedError, load_record, save_record
from rlvr.cli.stages.summary import stage_lines
from tests.cli.stages_helpers import tiny_stages, write_tiny_stages
from tests.conftest import write_config


def _load(tmp_path, stages: list[dict]):
    raw = tiny_stages("t")
    raw["stages"] = stages
    return load_config(write_config(tmp_path / "c.json", raw))


def test_the_four_stages_parse_with_their_kinds_and_overrides(tmp_path):
    cfg = load_config(write_tiny_stages(tmp_path / "c.json", "t"))
    kinds = [type(s) for s in cfg.stages]
    assert kinds == [SFTStage, RLStage, RejectionSFTStage, RLStage]
    assert [stage_name(s, i) for i, s in enumerate(cfg.stages)] == [
        "0-cold-start", "1-reasoning-rl", "2-rejection", "3-final-rl"]
    final = stage_learn(cfg.learn, cfg.stages[3], 3)
    assert final.steps == 3 and final.engine.ref_update_every == 2 and final.engine.loss.kl_coef == 0.001
    assert final.engine.loss.eps_high == cfg.learn.engine.loss.eps_high  # merged, not replaced
    rejection = stage_learn(cfg.learn, cfg.stages[2], 2)
    assert rejection.train_verifier.name == "regex" and cfg.stages[2].filters.max_per_prompt == 2


@pytest.mark.parametrize("stages, key", [
    ([{"kind": "dpo"}], "$.stages[0].kind"),
    ([{"kind": "rl", "steps": 3}], "unknown field `steps` - at `$.stages[0]`"),
    ([{"kind": "rl", "learn": {"stepz": 3}}], "unknown field `stepz` - at `$.stages[0].learn`"),
    ([{"kind": "rl", "learn": {"engine": {"optimizer": {"lr": -1}}}}], "$.stages[0].learn.engine.optimizer.lr"),
    ([{"kind": "sft"}, {"kind": "sft", "sft": {"step": 3}}], "unknown field `step` - at `$.stages[1].sft`"),
    ([{"kind": "rejection_sft", "n": 1}], "$.stages[0].n"),
    ([{"kind": "rejection_sft", "filters": {"max_tokens": 2, "min_tokens": 5}}], "$.stages[0].filters"),
    ([{"kind": "rejection_sft", "filters": {"dedupe": True}}], "unknown field `dedupe` - at `$.stages[0].filters`"),
    ([{"kind": "rl", "learn": {"prepare": {"kind": "tiny_arithmetic"}}}], "$.stages[0].learn.prepare"),
    ([{"kind": "rl", "learn": {"engine": {"lora": {"enabled": True}}}}], "$.stages[0].learn.engine.lora"),
    ([{"kind": "rl", "learn": {"sampling": {"temperature": 0.5}}}], "must equal learn.sampling.temperature"),
])
def test_a_bad_stage_is_an_error_naming_its_key(tmp_path, stages, key):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, stages)
    assert key in str(e.value)


def test_an_rl_stage_without_an_engine_is_refused_naming_the_stage(tmp_path):
    raw = tiny_stages("t")
    del raw["learn"]["engine"]
    raw["stages"] = [{"kind": "rejection_sft"}, {"kind": "rl"}]
    with pytest.raises(ConfigError, match=r"needs \[learn.engine\] - at `\$.stages\[1\]`"):
        load_config(write_config(tmp_path / "c.json", raw))


def test_a_table_with_another_tag_replaces_the_base_whole_and_others_merge():
    base = {"dataset": {"kind": "arithmetic", "ops": ["+"], "holdout": 5}, "engine": {"loss": {"a": 1, "b": 2}}}
    out = merge(base, {"dataset": {"kind": "jsonl", "path": "x.jsonl"}, "engine": {"loss": {"b": 3}}, "steps": 4})
    assert out == {"dataset": {"kind": "jsonl", "path": "x.jsonl"}, "engine": {"loss": {"a": 1, "b": 3}}, "steps": 4}
    assert base["engine"]["loss"]["b"] == 2  # the base is left alone


def test_a_stage_can_switch_its_dataset_kind(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1=", "answer": "2"}\n')
    cfg = _load(tmp_path, [{"kind": "rl", "learn": {"dataset": {"kind": "jsonl", "path": str(data)}}}])
    assert type(stage_learn(cfg.learn, cfg.stages[0], 0).dataset).__name__ == "JsonlDataset"


def test_a_role_started_on_a_staged_config_ignores_the_stages(tmp_path):
    from rlvr.cli.roles import load_role_config

    path = write_tiny_stages(tmp_path / "c.json", "t")
    for role in ("rollout", "verify", "learn"):
        assert load_role_config(role, path).run == "t"


def test_the_record_resumes_its_own_plan_only_and_is_written_whole(tmp_path):
    plan = ["sft:0-a", "rl:1-b"]
    record = load_record(tmp_path, plan)
    assert [s.status for s in record.stages] == ["pending", "pending"]
    record.stages[0].status, record.model = "done", "/m"
    save_record(tmp_path, record)
    assert not list(tmp_path.glob("*.tmp"))
    again = load_record(tmp_path, plan)
    assert again.stages[0].status == "done" and again.model == "/m"
    with pytest.raises(StagePlanChangedError, match="rl:1-b"):
        load_record(tmp_path, ["sft:0-a", "rl:1-c"])


def test_the_stage_table_shows_steps_pass_at_1_before_and_after_and_seconds():
    lines = stage_lines([
        {"index": 0, "name": "0-sft", "kind": "sft", "status": "done", "steps": 30, "pass_at_1_before": 0.05,
         "pass_at_1_after": 0.2, "seconds": 41.2, "detail": {}},
        {"index": 1, "name": "1-rejection", "kind": "rejection_sft", "status": "running", "steps": 0,
         "pass_at_1_before": 0.2, "pass_at_1_after": None, "seconds": 3, "detail": {
             "kept": {"sampled": 32, "rejected": 20, "duplicate": 2, "kept": 10}}},
    ])
    assert "pass@1 before" in lines[0]
    assert "0-sft" in lines[1] and "5.0%" in lines[1] and "20.0%" in lines[1] and "41" in lines[1]
    assert "n/a" in lines[2] and "kept 10 of 32: rejected 20, duplicate 2" in lines[3]


def test_copies_a_resumed_sampler_meets_are_not_counted_as_samples_dropped_before_the_filters():
    from rlvr.cli.stages.runner import dropped_before_the_filters

    # A sampling learner SIGKILLed and resumed (bench/chaos/stages_scenario.py, seed 0): its 32 samples
    # all dumped, 4 late duplicates of them met after the restart. Before: "dropped_before_the_filters 4".
    resumed = {"samples": {"scored": 32, "trained": 32, "dropped": 0, "in_flight": 0, "copies": 4},
               "drops": {"late_duplicate": 4}}
    assert dropped_before_the_filters(resumed) == 0
    real = {"samples": {"scored": 35, "trained": 32, "dropped": 3, "in_flight": 0, "copies": 3},
            "drops": {"partial": 3, "conflict": 2, "duplicate": 1, "late_duplicate": 0}}
    assert dropped_before_the_filters(real) == 3
    older = {"drops": {"partial": 2, "conflict": 2, "duplicate": 1, "late_duplicate": 4}}  # no `samples`
    assert dropped_before_the_filters(older) == 2


def _chaos_sampling_stage(tmp_path, quick: bool):
    """The quick or full chaos run's rejection stage (bench/chaos/stages_scenario.py): its filters and its
    train verifier, resolved as the sampling learner resolves it."""
    from bench.chaos.stages_scenario import stages_config
    from rlvr.verify.registry import resolve

    cfg = load_config(write_config(tmp_path / "c.json", stages_config("t", quick)))
    i, stage = next((i, s) for i, s in enumerate(cfg.stages) if isinstance(s, RejectionSFTStage))
    return stage.filters, resolve(stage_learn(cfg.learn, stage, i).train_verifier)


@pytest.mark.parametrize("quick", [True, False])
def test_the_chaos_sampling_stage_keeps_samples_however_little_the_warm_up_taught(tmp_path, quick):
    # CI once failed the quick chaos run here: a 20-step warm-up on another CPU ended none of its 24
    # answers within the 7-token limit, the stage dropped all 24 as truncated and, rightly, refused to
    # train on nothing. The scenario is about kills and custody; what it keeps must not hang on that.
    from rlvr.learner.data.rejection import select

    filters, verifier = _chaos_sampling_stage(tmp_path, quick)
    cut = ["1111111", "-+=3+-1", "=======", "+-+-+-+"]  # 7 tokens each, no EOS: finish_reason "length"
    records = [{"sample_id": f"g{p}/{j}", "dataset": "arith", "index": p, "prompt": "3+4=", "prompt_ids": [1],
                "text": text, "completion_ids": [j] * 7, "finish_reason": "length",
                "verdict": msgspec.to_builtins(verifier(text))} for p in range(6) for j, text in enumerate(cut)]
    kept, counts = select(records, filters)
    assert counts["truncated"] == counts["rejected"] == 0 and counts["kept"] == len(kept) == 6 * 2, counts


def test_the_chaos_sampling_stage_keeps_what_a_real_20_step_warm_up_wrote(tmp_path):
    # The 24 samples the quick run's sampler dumped on this machine (tests/data/real_answers/README.md):
    # 20 cut by the limit, one empty. Scored again by the scenario's verifier, every prompt keeps what
    # filters.max_per_prompt allows of its non-empty answers; only the empty one is rejected.
    from collections import Counter

    from rlvr.learner.data.rejection import select

    filters, verifier = _chaos_sampling_stage(tmp_path, quick=True)
    lines = (Path(__file__).parents[1] / "data" / "real_answers" / "chaos_warmup_dumps.jsonl").read_text()
    records = [{**r, "verdict": msgspec.to_builtins(verifier(r["text"]))} for r in map(json.loads, lines.splitlines())]
    assert sum(r["finish_reason"] == "length" for r in records) == 20  # what made the old filters keep ~nothing
    non_empty = Counter(r["index"] for r in records if r["text"])
    kept, counts = select(records, filters)
    assert counts["truncated"] == 0 and counts["rejected"] == len(records) - sum(non_empty.values()) == 1, counts
    assert counts["kept"] == len(kept) == sum(min(n, filters.max_per_prompt) for n in non_empty.values()), counts
