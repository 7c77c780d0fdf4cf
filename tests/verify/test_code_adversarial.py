"""Adversarial programs, one test per property (nanochat style). Each ends in
a verdict within its limit, the calling process is unharmed, and no secret
and no write escapes. Escape tests run under bwrap, the local backend's
isolation level."""

from __future__ import annotations

import os
import time

import msgspec
import pytest

from rlvr.verify.code import CodeParams, score_code
from rlvr.sandbox import SandboxLimits, SandboxUnavailableError, make_sandbox

LIMITS = SandboxLimits(wall_s=3.0, cpu_s=3, memory_mb=256, processes=16, output_bytes=16384)
PARAMS = msgspec.convert({"tests": {"entry_point": "solve", "asserts": ["assert solve() == 1", "assert solve() + 1 == 2"]}}, CodeParams)
SOLVE = "\ndef solve():\n    return 1\n"


@pytest.fixture(scope="module", params=["bwrap"])
def box(request):
    try:
        sb = make_sandbox("local", isolation=request.param)
    except SandboxUnavailableError as e:
        pytest.skip(f"isolation {request.param} unavailable here: {e}")
    yield sb
    sb.close()


@pytest.fixture(scope="module")
def auto_box():
    sb = make_sandbox("local")
    yield sb
    sb.close()


def _score(box, code: str):
    t0 = time.monotonic()
    v = score_code(f"```python\n{code}\n```", PARAMS, box, LIMITS)
    assert time.monotonic() - t0 < LIMITS.wall_s + 5  # a verdict within the limit (plus start-up)
    return v


def test_honest_solution_passes(box):
    assert _score(box, SOLVE).outcome == "ok"


def test_fork_bomb_is_contained(auto_box):
    v = _score(auto_box, "import os\nwhile True:\n    os.fork()" + SOLVE)
    assert v.outcome in ("wrong", "timeout") and v.reward == 0.0
    assert os.getpid() > 0 and os.fork  # the caller still runs


def test_memory_bomb_is_contained(auto_box):
    v = _score(auto_box, "x = []\nwhile True:\n    x.append(bytearray(10**7))" + SOLVE)
    assert (v.outcome, v.reward) == ("wrong", 0.0)


def test_infinite_loop_times_out(auto_box):
    v = _score(auto_box, "while True:\n    pass" + SOLVE)
    assert (v.outcome, v.reward) == ("timeout", 0.0)


def test_printing_1gb_is_cut_off(auto_box):
    v = _score(auto_box, "import sys\nfor _ in range(1 << 14):\n    sys.stdout.write('x' * (1 << 16))" + SOLVE)
    assert (v.outcome, v.reward) == ("wrong", 0.0)
    assert "output limit" in v.detail


def test_reading_etc_shadow_fails(box):
    code = "def solve():\n    return 1 if open('/etc/shadow').read() else 0\n"
    assert (_score(box, code).reward, os.path.exists("/etc/shadow")) == (0.0, True)


def test_host_env_secret_does_not_leak(box, monkeypatch):
    monkeypatch.setenv("RLVR_TEST_SECRET", "hunter2-very-secret")
    code = ("import os\nsecret = os.environ.get('RLVR_TEST_SECRET', '')\n"
            "leak = secret or open('/proc/1/environ').read()\n"
            "def solve():\n    return 1 if 'hunter2' in secret + leak else 0\n")
    v = _score(box, code)
    assert v.reward == 0.0 and "hunter2" not in v.detail + (v.extracted or "").replace("'hunter2'", "")


def test_socket_has_no_network(box):
    code = ("import socket\n"
            "def solve():\n    socket.create_connection(('1.1.1.1', 53), timeout=1)\n    return 1\n")
    assert _score(box, code).reward == 0.0


def test_write_outside_work_dir_does_not_escape(box, tmp_path):
    target = tmp_path / "escaped.txt"
    code = (f"import os\nfor p in [{str(target)!r}, '/tmp/rlvr-escaped.txt', '/work/main/escaped.txt', os.path.expanduser('~/escaped.txt')]:\n"
            "    try:\n        open(p, 'w').write('x')\n    except OSError:\n        pass\n" + SOLVE)
    v = _score(box, code)
    assert v.outcome == "ok"  # the writes failed quietly; the tests still ran
    assert not target.exists()
    assert not os.path.exists("/tmp/rlvr-escaped.txt")
    assert not os.path.exists("/work/main/escaped.txt")


def test_killing_the_parent_does_not_fake_a_pass(box):
    code = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef solve():\n    return 0\n"
    v = _score(box, code)
    assert (v.outcome, v.reward) == ("wrong", 0.0)


def test_sys_exit_before_the_tests_does_not_fake_a_pass(box):
    for code in ("import sys\nsys.exit(0)" + SOLVE.replace("1", "0"), "import os\nos._exit(0)" + SOLVE.replace("1", "0")):
        v = _score(box, code)
        assert (v.outcome, v.reward) == ("wrong", 0.0)


def test_printed_fake_records_do_not_count(box):
    code = ("import sys\nfor i in range(2):\n    sys.__stdout__.write('x [1, \"test\", %d, true, \"\"]\\n' % i)\n"
            "def solve():\n    return 0\n")
    assert _score(box, code).reward == 0.0
