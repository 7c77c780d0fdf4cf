"""The docker sandbox, for real where an engine answers (scripts/ci_docker.sh
starts one and builds ``rlvr-sandbox:local``); skipped, naming the reason,
where none does."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import msgspec
import pytest

from rlvr.verify.code import CodeParams, score_code
from rlvr.sandbox import SandboxLimits, SandboxUnavailableError, make_sandbox

pytestmark = pytest.mark.docker
LIMITS = SandboxLimits(wall_s=5.0, cpu_s=5, memory_mb=256, output_bytes=4096)
HUMANEVAL = Path(__file__).resolve().parents[2] / "data" / "humaneval" / "HumanEval.jsonl.gz"


@pytest.fixture(scope="module")
def box():
    try:
        sb = make_sandbox("docker", image=os.environ.get("RLVR_SANDBOX_IMAGE", "rlvr-sandbox:local"))
    except SandboxUnavailableError as e:
        pytest.skip(f"docker backend SKIPPED: {e}")
    yield sb
    sb.close()


def _py(box, code: str, stdin: str = "", limits: SandboxLimits = LIMITS):
    return box.run({"main.py": code}, ["python3", "main.py"], stdin, limits)


def test_runs_a_program_with_stdin(box):
    r = _py(box, "import sys\nprint(sys.stdin.read()[::-1])", "abc")
    assert (r.exit_code, r.stdout, r.error) == (0, "cba\n", "")


def test_no_network_read_only_root_and_no_host_env(box, monkeypatch):
    monkeypatch.setenv("RLVR_HOST_SECRET", "s3cret")
    code = ("import os, socket\nout = []\n"
            "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=1)\n    out.append('net')\nexcept OSError:\n    pass\n"
            "try:\n    open('/usr/escaped', 'w')\n    out.append('rootfs')\nexcept OSError:\n    pass\n"
            "open('local.txt', 'w').write('ok')\nprint(out, 's3cret' in str(os.environ), os.getuid())")
    r = _py(box, code)
    assert r.stdout == "[] False 65534\n"


def test_timeout_then_the_container_is_reused_cleanly(box):
    r = _py(box, "import os, time\nos.fork()\nwhile True:\n    pass", limits=SandboxLimits(wall_s=1.5, cpu_s=10))
    assert r.timed_out
    r = _py(box, "import os\nprint(os.listdir('..'))")
    assert r.exit_code == 0 and r.stdout.count("'") == 2  # only this run's dir is left in /work


def test_output_and_memory_limits(box):
    assert _py(box, "while True:\n    print('z' * 100)").output_truncated
    r = _py(box, "x = []\nwhile True:\n    x.append(bytearray(10**7))")
    assert r.memory_exceeded and r.exit_code != 0


def test_humaneval_sample_through_docker(box):
    with gzip.open(HUMANEVAL, "rt") as f:
        problems = [json.loads(line) for line in f]
    for p in random.Random(1).sample(problems, 12):
        params = msgspec.convert({"tests": {"check": p["test"], "entry_point": p["entry_point"]}}, CodeParams)
        good = score_code(f"```python\n{p['prompt']}{p['canonical_solution']}\n```", params, box, SandboxLimits(wall_s=20.0, cpu_s=20))
        bad = score_code(f"```python\n{p['prompt']}    return None\n```", params, box, SandboxLimits(wall_s=20.0, cpu_s=20))
        assert (good.outcome, bad.outcome) == ("ok", "wrong"), p["task_id"]
