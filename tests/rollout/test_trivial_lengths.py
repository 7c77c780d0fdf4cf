"""The trivial engine's long completions (``[rollout.engine.lengths]``, bench/scale): lengths drawn from the
configured lognormal and cut at the task's max_tokens, ids in the vocabulary, an answer the exact verifier
reads, the wire size of a real sample, pacing, and episodes left as they were."""

from __future__ import annotations

import math
import statistics

import anyio
import msgspec
import pytest

from rlvr.protocol import Completion, Sample, SamplingParams, VerifierSpec, encode
from rlvr.rollout.engines import TrivialEngineConfig, make_engine
from rlvr.rollout.engines.base import TrivialLengthsConfig
from rlvr.verify.simple import ExactParams, score_exact

R1_MAX_TOKENS = 32_768


def _groups(cfg: TrivialEngineConfig, groups: int, n: int = 8, max_tokens: int = R1_MAX_TOKENS, prompt="12+7="):
    engine = make_engine(cfg)

    async def go():
        return [await engine.generate(prompt, n, SamplingParams(max_tokens=max_tokens)) for _ in range(groups)]

    return anyio.run(go)


def test_lengths_follow_the_lognormal_and_are_cut_at_max_tokens():
    cfg = TrivialEngineConfig(accuracy=1.0, seed=3, lengths=TrivialLengthsConfig())
    gens = [g for r in _groups(cfg, 500) for g in r.generations]
    lengths = [len(g.ids) for g in gens]
    assert len(gens) == 4000
    assert statistics.median(lengths) == pytest.approx(2048, rel=0.06)
    # exp(1.18^2 / 2) = 2.0: a mean of ~4k before the cut, a little under it after.
    assert 3400 < statistics.fmean(lengths) < 4300
    cut = [g for g in gens if g.finish_reason == "length"]
    # P(length > 32,768) = P(Z > ln(16) / 1.18) = 0.95%
    assert 0.004 < len(cut) / len(gens) < 0.02
    assert all(len(g.ids) == R1_MAX_TOKENS for g in cut)
    assert max(lengths) == R1_MAX_TOKENS
    assert all(len(g.ids) == len(g.logprobs) for g in gens)


def test_ids_are_in_the_vocabulary_and_the_text_ends_with_an_answer_exact_reads():
    cfg = TrivialEngineConfig(accuracy=1.0, lengths=TrivialLengthsConfig(vocab_size=1000, median_tokens=300))
    gens = [g for r in _groups(cfg, 50, max_tokens=600) for g in r.generations]
    assert all(0 <= i < 1000 for g in gens for i in g.ids)
    assert len({i for g in gens for i in g.ids}) > 900  # drawn over the vocabulary, not a handful
    assert all(-50.0 <= lp <= 0.0 for g in gens for lp in g.logprobs)
    params = ExactParams(gold="19", after="####")
    for g in gens:
        verdict = score_exact(g.text, params, None)
        if g.finish_reason == "stop":
            assert g.text.endswith("\n#### 19")
            assert verdict.outcome == "ok"
            assert abs(len(g.text) - 4 * len(g.ids)) <= 8
        else:  # cut before its answer: nothing to read, as with a real engine
            assert verdict.outcome == "parse_error"
    assert {g.finish_reason for g in gens} == {"stop", "length"}


def test_a_long_sample_costs_on_the_wire_what_issue_46_measured():
    """Issue 46 encoded a 32,768-token Sample in 0.56 MB (~17 B per token: id, float64 log-prob, text)."""
    cfg = TrivialEngineConfig(lengths=TrivialLengthsConfig(median_tokens=10**6, sigma=0.0))
    g = _groups(cfg, 1, n=1)[0].generations[0]
    assert len(g.ids) == R1_MAX_TOKENS
    sample = Sample(run="r", task_id="t", sample_index=0, group_id="t", group_size=1, prompt_ids=list(b"12+7="),
                    completion=Completion(ids=g.ids, logprobs=g.logprobs), text=g.text, finish_reason=g.finish_reason,
                    policy_version=0, policy_version_max=0, verifier=VerifierSpec("exact", {"gold": "19"}),
                    sampling=SamplingParams(max_tokens=R1_MAX_TOKENS), replica="r0")
    size = len(encode(sample))
    assert 0.50e6 < size < 0.62e6
    assert 15 < size / R1_MAX_TOKENS < 19


def test_the_engine_is_paced_at_tokens_per_s():
    """A paced engine never emits faster than its rate, all its groups together (a lower bound only: a
    busy machine can make it slower, never faster)."""
    rate = 200_000.0
    cfg = TrivialEngineConfig(lengths=TrivialLengthsConfig(median_tokens=5000, sigma=0.0, tokens_per_s=rate))
    engine = make_engine(cfg)
    sampling = SamplingParams(max_tokens=R1_MAX_TOKENS)

    async def go():
        t0 = anyio.current_time()
        results = []

        async def one():
            results.append(await engine.generate("1+1=", 4, sampling))

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(one)
        return anyio.current_time() - t0, sum(len(g.ids) for r in results for g in r.generations)

    elapsed, tokens = anyio.run(go)
    assert tokens == 5 * 4 * 5000
    assert elapsed >= tokens / rate * 0.99


def test_episodes_and_the_default_keep_the_short_answers():
    cfg = TrivialEngineConfig(accuracy=1.0, lengths=TrivialLengthsConfig())
    engine = make_engine(cfg)
    turn = anyio.run(engine.generate_ids, list(b"user: 12+7=\nassistant: "), 2, SamplingParams(max_tokens=64))
    assert [g.text for g in turn.generations] == ["19", "19"]
    plain = _groups(TrivialEngineConfig(accuracy=1.0), 1)[0]
    assert [g.ids for g in plain.generations] == [list(b"19")] * 8


def test_a_bad_lengths_key_is_an_error_that_names_it():
    with pytest.raises(msgspec.ValidationError, match=r"median_token.*\$\.lengths"):
        msgspec.convert({"kind": "trivial", "lengths": {"median_token": 10}}, TrivialEngineConfig)
    with pytest.raises(msgspec.ValidationError, match=r"\$\.lengths\.sigma"):
        msgspec.convert({"kind": "trivial", "lengths": {"sigma": -1.0}}, TrivialEngineConfig)
    assert math.isclose(math.exp(TrivialLengthsConfig().sigma ** 2 / 2), 2.0, rel_tol=0.01)
