"""``rlvr-actor doctor``: log-prob agreement between the rollout engine and the learner, and the verdict.

The comparison itself (``agreement.compare``) and the verdict are checked on values built here; the
live session runs the built-in example for real (HF engine, verifier pool, DeepSpeed on CPU): its
tiny model is prepared once per module, with the doctor's capped warm-up, into a runs dir that the
CLI run then reuses (the cache); the CLI run is the honest one, and each injected mismatch has a
session of its own. Small settings throughout: 3 to 6 groups, 128 positions, 25 SFT steps.
"""

from __future__ import annotations

import json
from pathlib import Path

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


def test_a_top_k_kl_is_a_lower_bound_of_the_whole_one_and_still_flags_a_temperature_on_one_side():
    """vLLM gives its k most likely tokens per position: the KL over those and the rest taken as one
    outcome never exceeds the whole vocabulary's, so what it flags is flagged for certain."""
    logits = _dist(3, vocab=200) * 3
    rollout, learner = torch.log_softmax(logits / 0.7, -1), torch.log_softmax(logits, -1)
    sampled = rollout.argmax(-1)
    behaviour = rollout.gather(-1, sampled[:, None]).squeeze(-1)
    whole = compare(rollout, learner, sampled, behaviour)
    top = rollout.topk(20, -1)
    part = compare(top.values, learner, sampled, behaviour, rollout_ids=top.indices)
    assert (whole.kl_top, part.kl_top) == (0, 20)
    assert 0 < part.kl <= whole.kl
    assert part.flagged and any("top-20 (a lower bound) KL" in r for r in part.reasons), part.reasons
    assert part.topk_overlap == whole.topk_overlap
    every = rollout.topk(200, -1)  # every token listed: the split is the vocabulary, the KL the whole one
    assert compare(every.values, learner, sampled, behaviour, rollout_ids=every.indices).kl == pytest.approx(whole.kl)
    # vLLM's rows are ragged (k, or k + 1 with the sampled token): padding counts for nothing
    pad = torch.full((top.indices.shape[0], 1), -1)
    same = compare(torch.cat([top.values, torch.full(pad.shape, float("-inf"))], -1), rollout, sampled, behaviour,
                   rollout_ids=torch.cat([top.indices, pad], -1))
    assert not same.flagged and same.kl == pytest.approx(0.0, abs=1e-9) and same.topk_overlap == 1.0


def _vllm_config(extra: dict):
    import msgspec

    from rlvr.cli.commands.up import builtin_config_path
    from rlvr.cli.run_config import load_config
    from rlvr.rollout.engines.base import VLLMEngineConfig

    cfg = load_config(builtin_config_path())
    engine = VLLMEngineConfig(model="m", dtype="float32", max_prompt_tokens=16, max_model_len=32, extra=extra)
    return msgspec.structs.replace(cfg, rollout=msgspec.structs.replace(cfg.rollout, engine=engine))


def test_a_vllm_extra_that_changes_the_distribution_is_named_when_agreement_holds_and_first_when_it_does_not():
    import msgspec

    from rlvr.cli.doctor.agreement import Agreement
    from rlvr.cli.doctor.verdict import decide

    cfg = _vllm_config({"logprobs_mode": "raw_logprobs", "dtype": "float32", "quantization": None,
                        "enable_prefix_caching": False})  # the last three change nothing the doctor compares
    agrees = Agreement(positions=128, sampled_abs_diff_mean=1e-4, sampled_abs_diff_max=1e-3, kl=1e-6,
                       topk_overlap=1.0, flagged=False, reasons=[])
    result = msgspec.structs.replace(_flat_result(), zero_variance_groups=0, agreement_before=agrees)
    held = decide(cfg, result, [])
    assert held.go, held
    named = [w for w in held.warnings if w.startswith("rollout.engine.extra.")]
    assert len(named) == 1 and named[0].startswith("rollout.engine.extra.logprobs_mode = 'raw_logprobs'"), named
    flagged = msgspec.structs.replace(agrees, flagged=True, reasons=["sampled-token |diff| mean 0.3 > 0.02"])
    broke = decide(cfg, msgspec.structs.replace(result, agreement_before=flagged), [])
    assert not broke.go and "likely: rollout.engine.extra.logprobs_mode" in broke.first_fix, broke.first_fix


def _flat_result(groups: int = 8):
    from rlvr.cli.doctor.session import SessionResult, Timing

    return SessionResult(groups=groups, samples=8 * groups, outcomes={"ok": 8 * groups}, examples=[],
                         zero_variance_groups=groups,
                         agreement_before=None, agreement_after=None, steps_trained=0, reloaded=False,
                         timing=Timing(), mean_prompt_tokens=6.0, mean_completion_tokens=3.0, notes=[])


def _prep(cap: int, reached: bool = False):
    from rlvr.cli.doctor.warmup import Preparation

    return Preparation(model="m", sft_steps=cap or 250, sft_greedy_pass_at_1=0.2 if reached else 0.01,
                       target_pass_at_1=0.2, config_max_steps=2000, cap=cap, reached_target=reached, reused=False,
                       seconds=1.0)


def test_flat_rewards_after_a_capped_warm_up_are_a_warning_that_says_so_not_the_verdict():
    from rlvr.cli.commands.up import builtin_config_path
    from rlvr.cli.doctor.verdict import decide
    from rlvr.cli.run_config import load_config

    cfg = load_config(builtin_config_path())
    capped = decide(cfg, _flat_result(), [], _prep(25))
    assert capped.go, capped
    assert any("flat_reward" in w and "capped warm-up" in w for w in capped.warnings), capped.warnings
    assert any("CAPPED by the doctor at 25 steps" in w for w in capped.warnings), capped.warnings
    for prep in (None, _prep(0), _prep(25, reached=True)):  # the config's own warm-up, or the target reached
        v = decide(cfg, _flat_result(), [], prep)
        assert not v.go and v.first_fix.startswith("flat_reward"), (prep, v)
        assert not any("capped" in w for w in v.warnings), v.warnings


def test_flat_rewards_in_too_few_samples_are_a_warning_that_says_how_many_groups_decide_it():
    from rlvr.cli.commands.up import builtin_config_path
    from rlvr.cli.doctor.verdict import decide
    from rlvr.cli.run_config import load_config

    v = decide(load_config(builtin_config_path()), _flat_result(groups=4), [], None)
    assert v.go, v
    assert any("flat_reward" in w and "in only 32 samples" in w and "--groups 8" in w for w in v.warnings), v.warnings


def test_the_cache_key_follows_what_the_preparation_reads_and_the_cap():
    from rlvr.cli.commands.up import builtin_config_path, parse_sets
    from rlvr.cli.doctor.warmup import cache_key
    from rlvr.cli.run_config import load_config

    cfg = load_config(builtin_config_path())
    assert cache_key(cfg, 25) == cache_key(load_config(builtin_config_path()), 25)
    assert cache_key(cfg, 25) != cache_key(cfg, 50)
    for change in ("learn.prepare.hidden=64", "seed=1", "learn.dataset.max_operand=50", "learn.sampling.max_tokens=8"):
        assert cache_key(load_config(builtin_config_path(), overrides=parse_sets([change])), 25) != cache_key(cfg, 25), change
    # what the preparation does not read leaves the key alone
    assert cache_key(load_config(builtin_config_path(), overrides=parse_sets(["learn.steps=7"])), 25) == cache_key(cfg, 25)


def test_a_missing_model_folder_fails_naming_the_key_and_the_path(tmp_path, capsys):
    from rlvr.cli.main import main

    missing = tmp_path / "no-model-here"
    report = tmp_path / "doctor.json"
    config = Path(__file__).resolve().parents[2] / "examples" / "smollm2.toml"
    rc = main(["doctor", "--config", str(config), "--set", f"rollout.engine.model={missing}",
               "--set", f"learn.engine.model_path={missing}", "--report", str(report)])
    out = capsys.readouterr().out
    assert rc == 1
    assert f"FIX FIRST: start-up check failed: rollout.engine.model: {missing}" in out, out
    assert "rollout.engine.model" in json.loads(report.read_text())["verdict"]["first_fix"]


def test_a_negative_warm_up_cap_is_refused(capsys):
    from rlvr.cli.main import main

    assert main(["doctor", "--warmup-steps", "-1"]) == 2
    assert "--warmup-steps -1" in capsys.readouterr().err


# --- the live session on the built-in example ----------------------------------------------------------------
# The warm-up is the doctor's, capped at 25 SFT steps on batches of 32 (the checks here are of the plumbing and
# the agreement, which hold at any weights); the model is prepared once, into this module's runs dir.
WARMUP = 25
# The random verifier (p = 0.5): every group has reward variance but once in 128, so a step is always trained
# and the after-step checks always run (the exact verifier after 25 SFT steps gives mostly flat groups).
SMALL = ["learn.prepare.sft_batch=32", "learn.prepare.sft_check_prompts=50",
         'learn.dataset.verifier={name="random",params={p=0.5}}']


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("doctor-runs")


@pytest.fixture(scope="module")
def prepared(runs_dir):
    from rlvr.cli.commands.up import builtin_config_path, parse_sets
    from rlvr.cli.doctor.warmup import prepare
    from rlvr.cli.run_config import load_config

    cfg = load_config(builtin_config_path(), overrides=parse_sets([*SMALL, f"up.runs_dir={runs_dir}"]))
    return prepare(cfg, runs_dir, WARMUP, say=lambda _text: None)


@pytest.fixture(scope="module")
def honest_cli(prepared, runs_dir, tmp_path_factory: pytest.TempPathFactory):
    """``rlvr-actor doctor`` on the same settings, no injection: (exit code, what it printed, its JSON report)."""
    import contextlib
    import io

    from rlvr.cli.main import main

    out = tmp_path_factory.mktemp("doctor-cli")
    sets = [a for kv in [*SMALL, f"up.runs_dir={runs_dir}"] for a in ("--set", kv)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        rc = main(["doctor", *sets, "--warmup-steps", str(WARMUP), "--groups", "3", "--positions", "128",
                   "--minutes", "8", "--report", str(out / "doctor.json"), "--run-dir", str(out / "run")])
    return rc, printed.getvalue(), json.loads((out / "doctor.json").read_text())


def _session(cfg, inject: str = "", groups: int = 3, steps: int = 1):
    from rlvr.cli.doctor.session import run_session
    from rlvr.cli.doctor.verdict import decide

    result = run_session(cfg, groups=groups, steps=steps, positions=128, inject=inject, deadline_s=240,
                         say=lambda _t: None)
    return result, decide(cfg, result, [])


@pytest.mark.slow
def test_an_honest_run_agrees_within_threshold_before_and_after_a_step(honest_cli):
    _, _, doc = honest_cli
    result, verdict = doc["result"], doc["verdict"]
    assert result["agreement_before"] is not None and not result["agreement_before"]["flagged"], result
    assert result["agreement_before"]["kl"] is not None  # the HF engine: the full-vocabulary comparison ran
    assert result["steps_trained"] and result["reloaded"], result
    assert result["agreement_after"] is not None and not result["agreement_after"]["flagged"], result
    group_size = 8  # the built-in example's learn.group_size
    assert result["samples"] == 3 * group_size and sum(result["outcomes"].values()) == result["samples"]
    assert not any("agree" in p for p in verdict["problems"]), verdict


@pytest.mark.slow
def test_doctor_cli_writes_a_json_report_with_one_verdict(honest_cli):
    rc, out, doc = honest_cli
    assert set(doc) >= {"config", "preparation", "result", "forecast", "verdict"}
    assert ("verdict: GO" in out) == doc["verdict"]["go"] == (rc == 0)
    assert out.count("verdict: ") == 1
    assert doc["forecast"]["rollout_tokens_per_s"] > 0


@pytest.mark.slow
def test_the_capped_warm_up_is_reported_and_its_model_reused_by_the_next_doctor(prepared, honest_cli):
    _, prep = prepared
    assert prep.cap == WARMUP and prep.sft_steps <= WARMUP and not prep.reused
    _, out, doc = honest_cli
    assert doc["preparation"]["reused"] and doc["preparation"]["model"] == prep.model
    assert doc["preparation"]["capped"] == prep.capped
    if prep.capped:  # 25 steps stay far below the 20% target: said in the report and the warnings
        assert f"CAPPED by the doctor at {WARMUP} steps" in out, out
        assert any("warm-up was capped" in w for w in doc["verdict"]["warnings"]), doc["verdict"]


@pytest.mark.slow
def test_a_temperature_on_the_rollout_side_only_is_flagged_with_its_cause(prepared):
    result, verdict = _session(prepared[0], inject="temperature=0.5", steps=0)
    assert result.agreement_before is not None and result.agreement_before.flagged
    assert not verdict.go
    assert "temperature" in verdict.first_fix, verdict.first_fix


@pytest.mark.slow
def test_weights_not_reloaded_after_a_step_are_flagged(prepared):
    result, verdict = _session(prepared[0], inject="no-reload")
    assert result.steps_trained and not result.reloaded
    assert result.agreement_before is not None and not result.agreement_before.flagged
    assert result.agreement_after is not None and result.agreement_after.flagged, result.agreement_after
    assert not verdict.go and "reload" in verdict.first_fix, verdict.first_fix


BF16_TEXT = "sampled-token |diff| mean <= 0.1, KL <= 0.05, top-5 overlap >= 0.6"


@pytest.mark.slow
@pytest.mark.parametrize("side", ["rollout", "learner"])
def test_a_bf16_side_against_an_fp32_side_is_go_and_named_with_the_bf16_thresholds(prepared, side):
    import msgspec

    cfg = prepared[0]
    if side == "rollout":
        cfg = msgspec.structs.replace(cfg, rollout=msgspec.structs.replace(
            cfg.rollout, engine=msgspec.structs.replace(cfg.rollout.engine, dtype="bfloat16")))
    else:
        cfg = msgspec.structs.replace(cfg, learn=msgspec.structs.replace(
            cfg.learn, engine=msgspec.structs.replace(cfg.learn.engine, bf16=True)))
    result, verdict = _session(cfg, steps=0)
    assert result.agreement_before is not None and not result.agreement_before.flagged, result.agreement_before
    assert verdict.go, verdict
    said = [w for w in verdict.warnings if w.startswith("dtype differs")]
    rollout, learner = ("bfloat16", "float32") if side == "rollout" else ("float32", "bfloat16")
    assert len(said) == 1 and f"the rollout runs {rollout}" in said[0] and f"the learner {learner}" in said[0], said
    assert BF16_TEXT in said[0] and "is within them" in said[0], said


@pytest.mark.slow
def test_the_hf_engines_auto_dtype_is_float32_so_a_flagged_top_p_names_no_dtype_difference(prepared):
    import msgspec

    cfg = prepared[0]
    cfg = msgspec.structs.replace(
        cfg, rollout=msgspec.structs.replace(cfg.rollout, engine=msgspec.structs.replace(cfg.rollout.engine, dtype="auto")),
        learn=msgspec.structs.replace(cfg.learn, sampling=msgspec.structs.replace(cfg.learn.sampling, top_p=0.5)))
    result, verdict = _session(cfg, steps=0)
    assert not verdict.go and "top_p = 0.5" in verdict.first_fix, verdict
    assert "dtype" not in verdict.first_fix and not any("dtype" in w for w in verdict.warnings), verdict
    assert (result.rollout_dtype, result.learner_dtype) == ("float32", "float32")
