"""Hostile programs, one test per attack class: each must score 0 (reward 0,
outcome not ``ok``) in every format the attack applies to, on the local
backend and on docker where an engine answers; honest programs score 1.

Each program is written as an attacker who has read ``rlvr.verify.code``,
``code_driver``, ``code_child`` and ``code_wire`` would write it: it goes
after the record key, the expected values, the test code and the driver, and
returns what it found (else a wrong answer, ``a - b``). Formats: literal
asserts (compared outside), other asserts and HumanEval ``check`` (run in the
driver process), LeetCode/LiveCodeBench ``fn_name`` cases, stdin/stdout.
"""

from __future__ import annotations

import os

import msgspec
import pytest

from rlvr.verify.code import CodeParams, score_code
from rlvr.sandbox import SandboxLimits, SandboxUnavailableError, make_sandbox
from tests.verify.code_hostile_programs import (
    FAKER,
    FAKER_STDIN,
    LIARS,
    MEMREADER,
    PATCHES,
    POISONER,
    READER,
    READER_STDIN,
    STRIPPER,
    WALKER,
    WRONG,
)

LIMITS = SandboxLimits(wall_s=6.0, cpu_s=6, memory_mb=512, processes=32, output_bytes=65536)
SLEEP_LIMITS = SandboxLimits(wall_s=1.5, cpu_s=2, memory_mb=512, processes=32)

CHECK = '''import statistics

def check(candidate):
    assert candidate(2, 3) == 5
    assert abs(candidate(0.5, 0.25) - 0.75) < 1e-9
    assert statistics.mean([candidate(1, 1), candidate(3, 3)]) == 4
'''
FORMATS = {
    "asserts": {"tests": {"entry_point": "add", "asserts": [
        "assert add(2, 3) == 5", "assert add(10, -4) == 6", "assert add([1], [2, 3]) == [1, 2, 3]"]}},
    "asserts_code": {"setup": "import fractions\nimport math", "tests": {"entry_point": "add", "asserts": [
        "assert add(2, 3) == 2 + 3", "assert fractions.Fraction(add(1, 1)) == 2", "assert math.isclose(add(0.5, 0.25), 0.75)"]}},
    "check": {"tests": {"entry_point": "add", "check": CHECK}},
    "lcb": {"fn_name": "add", "tests": [
        {"input": "2\n3", "output": "5"}, {"input": "10\n-4", "output": "6"}, {"input": "[1]\n[2, 3]", "output": "[1, 2, 3]"}]},
    "stdin": {"tests": [{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4\n", "output": "6\n"}]},
}
# Every assert inside a loop over map(candidate, ...): a StopIteration that
# reached this code from the candidate would end each loop as if all passed.
FORMATS["check_map"] = {"tests": {"entry_point": "add", "check": (
    "def check(candidate):\n"
    "    for got, want in zip(map(candidate, [2, 10], [3, -4]), [5, 6]):\n        assert got == want\n"
    "    for got in map(candidate, [0.5], [0.25]):\n        assert abs(got - 0.75) < 1e-9\n")}}
CALL_FORMATS = ("asserts", "asserts_code", "check", "lcb")
# stdin/stdout form of a hostile program: its (wrong) add on the input line.
STDIN_MAIN = "a, b = map(int, input().split())\nprint(add(a, b))\n"
# LeetCode form: the method forwards to the module-level function.
SOLUTION = "\nclass Solution:\n    def add(self, a, b):\n        return add(a, b)\n"


# A docker run costs about a second (an exec per run), so the docker half is slow.
@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.slow])])
def box(request):
    try:
        if request.param == "docker":
            sb = make_sandbox("docker", image=os.environ.get("RLVR_SANDBOX_IMAGE", "rlvr-sandbox:local"))
        else:
            sb = make_sandbox("local")
    except SandboxUnavailableError as e:
        pytest.skip(f"{request.param} backend SKIPPED: {e}")
    yield sb
    sb.close()


def _score(box, fmt: str, program: str, limits: SandboxLimits = LIMITS):
    params = msgspec.convert(FORMATS[fmt], CodeParams)
    if fmt == "lcb":
        program += SOLUTION
    return score_code(f"```python\n{program}\n```", params, box, limits)


def _all_zero(box, programs: dict[str, str], formats=CALL_FORMATS, limits: SandboxLimits = LIMITS) -> dict:
    """{(format, variant): (outcome, reward, detail)} of every run that scored."""
    scored = {}
    for fmt in formats:
        for name, program in programs.items():
            v = _score(box, fmt, program, limits)
            if v.reward != 0.0 or v.outcome == "ok":
                scored[(fmt, name)] = (v.outcome, v.reward, v.detail)
    return scored


# -- honest programs score 1 ---------------------------------------------------------------

HONEST = "def add(a, b):\n    return a + b\n"
HONEST_LCB = "class Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b\n"
HONEST_STDIN = "a, b = map(int, input().split())\nprint(a + b)\n"


def test_honest_programs_score_one(box):
    for fmt in CALL_FORMATS:
        v = score_code(f"```python\n{HONEST}\n```", msgspec.convert(FORMATS[fmt], CodeParams), box, LIMITS)
        assert (fmt, v.outcome, v.reward) == (fmt, "ok", 1.0), v.detail
    for fmt, program in (("lcb", HONEST_LCB), ("stdin", HONEST_STDIN)):
        v = score_code(f"```python\n{program}\n```", msgspec.convert(FORMATS[fmt], CodeParams), box, LIMITS)
        assert (fmt, v.outcome, v.reward) == (fmt, "ok", 1.0), v.detail


# -- lying __eq__ / __hash__ / __bool__ ----------------------------------------------------

def test_lying_eq_hash_bool_objects_score_zero(box):
    programs = {
        "object": LIARS + "def add(a, b):\n    return Liar()\n",
        "int_subclass": LIARS + "def add(a, b):\n    return LyingInt(a - b if isinstance(a, int) else 0)\n",
        "list_subclass": LIARS + "def add(a, b):\n    return LyingList()\n",
        "nested": LIARS + "def add(a, b):\n    return [Liar(), LyingStr('x')]\n",
        "namedtuple_of_liars": LIARS + "import collections\nP = collections.namedtuple('P', 'x')\ndef add(a, b):\n    return P(Liar())\n",
    }
    assert _all_zero(box, programs) == {}


# -- frame, traceback and gc walks ---------------------------------------------------------

def test_frame_traceback_and_gc_walks_score_zero(box):
    assert _all_zero(box, {"walker": WALKER}) == {}
    assert _all_zero(box, {"walker": WALKER + STDIN_MAIN}, formats=("stdin",)) == {}


# -- patching builtins, AssertionError and the harness -------------------------------------

def test_patching_builtins_and_the_harness_scores_zero(box):
    assert _all_zero(box, {name: patch + WRONG for name, patch in PATCHES.items()}) == {}
    stdin = {name: patch + "a, b = map(int, input().split())\nprint(a - b)\n" for name, patch in PATCHES.items()}
    assert _all_zero(box, stdin, formats=("stdin",)) == {}


# -- stripping asserts ---------------------------------------------------------------------

def test_stripping_asserts_scores_zero(box):
    assert _all_zero(box, {"stripper": STRIPPER}, formats=("asserts", "asserts_code", "check")) == {}
    assert _all_zero(box, {"stripper": STRIPPER + STDIN_MAIN}, formats=("stdin",)) == {}


# -- sys.modules poisoning -----------------------------------------------------------------

def test_sys_modules_poisoning_scores_zero(box):
    assert _all_zero(box, {"poisoner": POISONER}) == {}
    assert _all_zero(box, {"poisoner": POISONER + STDIN_MAIN}, formats=("stdin",)) == {}


# -- printing fake records ------------------------------------------------------------------

def test_printed_fake_records_score_zero(box):
    assert _all_zero(box, {"faker": FAKER}) == {}
    assert _all_zero(box, {"faker": FAKER_STDIN}, formats=("stdin",)) == {}


# -- sys.exit / os._exit ---------------------------------------------------------------------


def test_exiting_at_import_or_in_the_call_scores_zero(box):
    programs = {
        "sys_exit_import": "import sys\nsys.exit(0)\n" + WRONG,
        "os_exit_import": "import os\nos._exit(0)\n" + WRONG,
        "sys_exit_call": "import sys\ndef add(a, b):\n    sys.exit(0)\n",
        "os_exit_call": "import os\ndef add(a, b):\n    os._exit(0)\n",
        "kill_parent_then_exit": "import os, signal\ndef add(a, b):\n    os.kill(os.getppid(), signal.SIGKILL)\n    os._exit(0)\n",
        "kill_self": "import os, signal\ndef add(a, b):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    }
    assert _all_zero(box, programs) == {}
    stdin = {"sys_exit": "import sys\nsys.exit(0)\n", "os_exit": "import os\nos._exit(0)\n"}
    assert _all_zero(box, stdin, formats=("stdin",)) == {}


# -- reading files to hard-code answers -------------------------------------------------------

def test_reading_files_in_the_sandbox_scores_zero(box):
    assert _all_zero(box, {"reader": READER, "driver_memory": MEMREADER}) == {}
    assert _all_zero(box, {"reader": READER_STDIN}, formats=("stdin",)) == {}


# -- BaseException subclasses ------------------------------------------------------------------


def test_raising_base_exceptions_scores_zero(box):
    programs = {}
    for exc in ("KeyboardInterrupt", "SystemExit", "GeneratorExit", "Custom"):
        custom = "class Custom(BaseException):\n    pass\n"
        programs[f"{exc}_import"] = custom + f"raise {exc}()\n" + WRONG
        programs[f"{exc}_call"] = custom + f"def add(a, b):\n    raise {exc}()\n"
    programs["raise_in_generator_result"] = (
        "def add(a, b):\n    def g():\n        raise KeyboardInterrupt\n        yield 5\n    return g()\n")
    programs["StopIteration_call"] = "def add(a, b):\n    raise StopIteration\n"
    assert _all_zero(box, programs, formats=(*CALL_FORMATS, "check_map")) == {}
    stdin = {"KeyboardInterrupt": "raise KeyboardInterrupt\n", "Custom": "class C(BaseException):\n    pass\nraise C()\n"}
    assert _all_zero(box, stdin, formats=("stdin",)) == {}


# -- sleeping out the timeout ------------------------------------------------------------------


def test_sleeping_out_the_timeout_scores_zero(box):
    runs = [("asserts", "import time\ntime.sleep(3600)\n" + WRONG)]  # at import
    runs += [(fmt, "import time\ndef add(a, b):\n    time.sleep(3600)\n") for fmt in CALL_FORMATS]
    runs += [("check", "import os, signal, time\ndef add(a, b):\n    os.kill(os.getppid(), signal.SIGSTOP)\n    time.sleep(3600)\n")]
    for fmt, program in runs:
        v = _score(box, fmt, program, SLEEP_LIMITS)
        assert (fmt, v.outcome, v.reward) == (fmt, "timeout", 0.0), (program, v.detail)
    v = _score(box, "stdin", "import time\ntime.sleep(3600)\n", SLEEP_LIMITS)
    assert (v.outcome, v.reward) == ("timeout", 0.0)
