"""``rlvr-actor doctor``: log-prob agreement between the rollout engine and the learner, and the verdict.

The comparison itself (``agreement.compare``) is checked on distributions built here; the live
session runs the built-in example for real (its tiny model prepared once per module: HF engine,
verifier pool, DeepSpeed on CPU), honest and with each injected mismatch.
"""

from __future__ import annotations

import json

import pytest
import torch

from rlvr.cli.doctor.agreement import Thresholds, compare


def _dist(seed: int, positions: int = 64, vocab: int = 50) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(positions, vocab, generator=g) * 2, -1)


def test_identical_distributions_agree():
    logp = _dist(0)
    sampled = torch.distributions.Categorical(logits=logp).sample()
    a = compare(logp, logp.clone(), sampled, logp.gather(-1, sampled[:, None]).squeeze(-1))
    assert not a.flagged and a.kl == pytest.approx(0.0, abs=1e-6) and a.topk_overlap == 1.0
    assert a.sampled_abs_diff_max == pytest.approx(0.0, abs=1e-6)


def test_a_temperature_on_one_side_only_is_flagged_by_kl_even_when_sampled_tokens_agree():
    logits = _dist(1) * 3
    rollout = torch.log_softmax(logits / 0.7, -1)
    learner = torch.log_softmax(logits, -1)
    sampled = rollout.argmax(-1)
    a = compare(rollout, learner, sampled, rollout.gather(-1, sampled[:, None]).squeeze(-1), Thresholds())
    assert a.flagged and a.kl > Thresholds().kl
    assert any("KL" in r for r in a.reasons)


def test_sampled_tokens_only_when_the_engine_gives_no_distribution():
    learner = _dist(2)
    sampled = learner.argmax(-1)
    a = compare(None, learner, sampled, learner.gather(-1, sampled[:, None]).squeeze(-1) - 0.5)
    assert a.kl is None and a.topk_overlap is None
    assert a.flagged and a.sampled_abs_diff_mean == pytest.approx(0.5, abs=1e-5)


# --- the live session on the built-in example ----------------------------------------------------------------
# The warm-up is cut short (its first check, 25 SFT steps): the checks here are of the plumbing and the
# agreement, which hold at any weights; the run's own doctor keeps the config's full warm-up.
SHORT_SFT = ["learn.prepare.sft_max_steps=25", "learn.prepare.sft_batch=32"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory):
    from rlvr.cli.commands.up import builtin_config_path, parse_sets
    from rlvr.cli.doctor.session import prepare
    from rlvr.cli.run_config import load_config

    run_dir = tmp_path_factory.mktemp("doctor")
    (run_dir / "logs").mkdir()
    cfg = load_config(builtin_config_path(), overrides=parse_sets(SHORT_SFT))
    return prepare(cfg, run_dir, say=lambda _text: None)


def _session(cfg, inject: str = "", groups: int = 3):
    from rlvr.cli.doctor.session import run_session
    from rlvr.cli.doctor.verdict import decide

    result = run_session(cfg, groups=groups, steps=1, positions=128, inject=inject, deadline_s=240, say=lambda _t: None)
    return result, decide(cfg, result, [])


@pytest.mark.slow
def test_an_honest_run_agrees_within_threshold_before_and_after_a_step(prepared):
    result, verdict = _session(prepared)
    assert result.agreement_before is not None and not result.agreement_before.flagged, result.agreement_before
    if result.steps_trained:  # a step needs one group with reward variance
        assert result.reloaded
        assert result.agreement_after is not None and not result.agreement_after.flagged, result.agreement_after
    assert result.samples == 3 * prepared.learn.group_size and sum(result.outcomes.values()) == result.samples
    assert not any("agree" in p for p in verdict.problems), verdict


@pytest.mark.slow
def test_a_temperature_on_the_rollout_side_only_is_flagged_with_its_cause(prepared):
    result, verdict = _session(prepared, inject="temperature=0.5")
    assert result.agreement_before is not None and result.agreement_before.flagged
    assert not verdict.go
    assert "temperature" in verdict.first_fix, verdict.first_fix


@pytest.mark.slow
def test_weights_not_reloaded_after_a_step_are_flagged(prepared):
    result, verdict = _session(prepared, inject="no-reload", groups=6)
    if not result.steps_trained:
        pytest.skip(f"no group of {result.groups} had reward variance: nothing trained, nothing to reload")
    assert not result.reloaded
    assert result.agreement_before is not None and not result.agreement_before.flagged
    assert result.agreement_after is not None and result.agreement_after.flagged, result.agreement_after
    assert not verdict.go and "reload" in verdict.first_fix, verdict.first_fix


@pytest.mark.slow
def test_doctor_cli_writes_a_json_report_with_one_verdict(tmp_path, capsys):
    from rlvr.cli.main import main

    report = tmp_path / "doctor.json"
    rc = main(["doctor", *(a for kv in SHORT_SFT for a in ("--set", kv)), "--groups", "2", "--positions", "64", "--report", str(report), "--run-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    doc = json.loads(report.read_text())
    assert set(doc) >= {"config", "result", "forecast", "verdict"}
    assert ("verdict: GO" in out) == doc["verdict"]["go"] == (rc == 0)
    assert doc["forecast"]["rollout_tokens_per_s"] > 0
