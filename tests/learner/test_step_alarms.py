"""The stage-1 alarms (learner/watch/step_alarms.py): each fires on synthetic step records, none on a healthy run's."""

from __future__ import annotations

import json

import msgspec
import pytest

from rlvr.learner.watch.step_alarms import StepAlarmConfig, StepWatch, foreign_script_share, script_of
from tests.conftest import REPO

HEALTHY = [json.loads(line) for line in (REPO / "tests" / "data" / "healthy_steps.jsonl").read_text().splitlines()]
CFG = StepAlarmConfig(window_steps=5, baseline_steps=5)


def _run(records: list[dict], cfg: StepAlarmConfig = CFG) -> tuple[StepWatch, list]:
    watch, raised = StepWatch(cfg), []
    for rec in records:
        raised += watch.step(rec)
    return watch, raised


def _steps(n: int, **values) -> list[dict]:
    return [{"step": i + 1, "samples": 256.0, **{k: (v(i) if callable(v) else v) for k, v in values.items()}}
            for i in range(n)]


def test_a_healthy_run_raises_nothing():
    # The built-in example's 600 steps (tests/data/healthy_steps.jsonl: 2026-12-01, run 5 of the README),
    # with the default thresholds.
    watch, raised = _run(HEALTHY, StepAlarmConfig())
    for label, step, p in (("before", 0, 0.181), ("step300", 300, 0.363), ("after", 600, 0.489)):  # its rounds
        raised += watch.eval_round(label, step, p)
    assert raised == [] and not watch.counts


def test_kl_past_its_bound_or_jumping_fires():
    _, raised = _run(_steps(8, kl=lambda i: 0.01 * (i + 1)) + _steps(1, kl=1.5))
    assert [a.kind for a in raised] == ["kl_high"] and "above kl_max" in raised[0].message
    _, jumped = _run(_steps(3, kl=0.002) + _steps(1, kl=0.05))
    assert [a.kind for a in jumped] == ["kl_high"] and "jumped" in jumped[0].message
    _, quiet = _run(_steps(10, kl=lambda i: 0.01 + 0.001 * i))
    assert quiet == []


def test_entropy_collapsing_fires_once_while_it_holds():
    watch, raised = _run(_steps(5, entropy=0.8) + _steps(10, entropy=0.05))
    assert [a.kind for a in raised] == ["entropy_collapse"] and watch.counts["entropy_collapse"] == 1
    assert "entropy collapsed" in watch.alerts()[0]
    _, healthy = _run(_steps(5, entropy=0.8) + _steps(10, entropy=0.5))
    assert healthy == []


def test_language_mixing_fires_on_foreign_letters_but_not_on_an_expected_second_script():
    english = "The answer is 42, because six times seven is forty-two."
    mixed = "The answer is 42, 因为六乘以七等于四十二。"
    share = foreign_script_share([mixed], ("LATIN",))
    assert share > 0.3
    assert foreign_script_share([mixed], ("LATIN", "CJK")) == 0.0
    assert foreign_script_share([english], ("LATIN",)) == 0.0
    _, raised = _run(_steps(6, foreign_script_share=share))
    assert [a.kind for a in raised] == ["language_mixing"]
    _, quiet = _run(_steps(6, foreign_script_share=0.0))
    assert quiet == []


def test_real_model_answers_in_english_are_not_language_mixing():
    texts = [json.loads(line)["response"] for line in
             (REPO / "tests" / "data" / "real_answers" / "byo_words.jsonl").read_text().splitlines()]
    assert len(texts) > 100 and foreign_script_share(texts, ("LATIN",)) < 0.01


def test_completions_at_the_length_cap_fire():
    _, raised = _run(_steps(6, response_clip_ratio=0.7, response_len_mean=511.0))
    assert [a.kind for a in raised] == ["length_at_cap"] and "511" in raised[0].message


def test_a_rising_dropped_share_fires():
    # 100 samples dropped per 256 trained at first, then 2,000 per step: 28% -> 89%.
    drops = [100.0 * (i + 1) for i in range(5)] + [500.0 + 2000.0 * (i + 1) for i in range(6)]
    _, raised = _run([{"step": i + 1, "samples": 256.0, "drop_zero_variance": d} for i, d in enumerate(drops)])
    assert [a.kind for a in raised] == ["invalid_batches"]


def test_script_names():
    assert [script_of(c) for c in "aЖ中ひ한1 "] == ["LATIN", "CYRILLIC", "CJK", "HIRAGANA", "HANGUL", None, None]


def test_thresholds_are_config_keys():
    with pytest.raises(msgspec.ValidationError, match="entropy_drop"):
        msgspec.convert({"entropy_drop": 2.0}, StepAlarmConfig)


def test_completions_shrinking_to_nothing_fire():
    # The random-reward control on the built-in example: 3.3 tokens per answer, then empty ones (EOS only).
    _, raised = _run(_steps(5, response_len_mean=3.3) + _steps(6, response_len_mean=1.2))
    assert [a.kind for a in raised] == ["length_collapse"]
    _, quiet = _run(_steps(5, response_len_mean=3.3) + _steps(6, response_len_mean=3.0))
    assert quiet == []


def test_a_held_out_round_below_the_one_before_rl_fires_and_a_recovery_clears_it():
    watch = StepWatch(CFG)
    assert watch.eval_round("before", 0, 0.19) == []
    assert watch.eval_round("step300", 300, 0.25) == []  # better: nothing
    fell = watch.eval_round("step600", 600, 0.009)
    assert [a.kind for a in fell] == ["eval_regression"] and "19.0%" in fell[0].message
    assert watch.step({"step": 601}) == [] and "held-out pass@1 fell" in watch.alerts()[0]  # held, not raised again
    assert watch.eval_round("step900", 900, 0.2) == [] and watch.alerts() == []
    assert watch.counts["eval_regression"] == 1


def test_the_random_control_run_says_it_is_going_wrong():
    # runs/builtin-random (2026-12-01): held-out pass@1 19.1% -> 0.9% -> 0.4%, lengths 3.3 -> 1.6.
    watch = StepWatch()
    watch.eval_round("before", 0, 0.191)
    assert [a.kind for a in watch.eval_round("step300", 300, 0.009)] == ["eval_regression"]
