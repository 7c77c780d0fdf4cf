"""The trivial engine: arithmetic answers with a set accuracy, no torch."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys

import pytest

from rlvr.protocol import ChatMessage, SamplingParams
from rlvr.rollout.engines import TrivialEngineConfig, WeightsRejectedError, make_engine
from rlvr.rollout.engines.trivial import solve


def _gen(engine, prompt, n=8, **kw):
    return asyncio.run(engine.generate(prompt, n, SamplingParams(**kw)))


def test_solve_reads_the_trailing_expression():
    assert solve("What is 12+7=") == 19
    assert solve("3 - 10 =") == -7
    assert solve("6*7= ") == 42
    assert solve("no maths here") is None


def test_accuracy_one_always_answers_right():
    engine = make_engine(TrivialEngineConfig(accuracy=1.0))
    r = _gen(engine, "12+7=")
    assert [g.text for g in r.generations] == ["19"] * 8
    g = r.generations[0]
    assert g.ids == list(b"19") and g.finish_reason == "stop"
    assert g.logprobs == [0.0, 0.0]
    assert r.prompt_ids == list(b"12+7=")


def test_accuracy_zero_always_answers_near_but_wrong():
    engine = make_engine(TrivialEngineConfig(accuracy=0.0))
    r = _gen(engine, [ChatMessage("user", "45-13=")], n=20)
    answers = [int(g.text) for g in r.generations]
    assert all(a != 32 and abs(a - 32) <= 3 for a in answers)
    assert r.generations[0].logprobs[0] == pytest.approx(math.log(1 / 6))


def test_seeded_groups_are_reproducible_and_mixed():
    engine = make_engine(TrivialEngineConfig(accuracy=0.5, seed=1))
    a = _gen(engine, "2+2=", n=16, seed=9)
    b = _gen(engine, "2+2=", n=16, seed=9)
    assert a == b
    assert 0 < sum(g.text == "4" for g in a.generations) < 16


def test_max_tokens_truncates_with_length():
    engine = make_engine(TrivialEngineConfig(accuracy=1.0))
    g = _gen(engine, "500+500=", n=1, max_tokens=2).generations[0]
    assert (g.text, g.finish_reason) == ("10", "length")


def test_load_weights_bumps_version_and_rejects_missing_dir(tmp_path):
    engine = make_engine(TrivialEngineConfig())
    asyncio.run(engine.load_weights(tmp_path, 3))
    assert engine.weights_version == 3
    assert _gen(engine, "1+1=").weights_version_max == 3
    with pytest.raises(WeightsRejectedError):
        asyncio.run(engine.load_weights(tmp_path / "absent", 4))
    assert engine.weights_version == 3


def test_trivial_engine_imports_no_torch():
    code = (
        "import asyncio, sys\n"
        "from rlvr.rollout.engines import TrivialEngineConfig, make_engine\n"
        "from rlvr.protocol import SamplingParams\n"
        "e = make_engine(TrivialEngineConfig())\n"
        "asyncio.run(e.generate('1+2=', 2, SamplingParams()))\n"
        "assert 'torch' not in sys.modules and 'vllm' not in sys.modules, 'heavy import'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
