"""MBPP (sanitized) reference solutions pass in call-based assert style, and
a wrong solution fails."""

from __future__ import annotations

import ast
import json
import random
import re
from pathlib import Path

import msgspec
import pytest

from rlvr.verify.code import CodeParams, score_code
from rlvr.sandbox import SandboxLimits, make_sandbox

DATA = Path(__file__).resolve().parents[2] / "data" / "mbpp" / "sanitized-mbpp.json"
LIMITS = SandboxLimits(wall_s=20.0, cpu_s=20)


def _entry_point(p: dict) -> str:
    names = [n.name for n in ast.parse(p["code"]).body if isinstance(n, ast.FunctionDef)]
    called = re.findall(r"([A-Za-z_]\w*)\(", p["test_list"][0])
    return next(c for c in called if c in names)


def _params(p: dict) -> CodeParams:
    return msgspec.convert(
        {"tests": {"entry_point": _entry_point(p), "asserts": p["test_list"]}, "setup": "\n".join(p["test_imports"])},
        CodeParams,
    )


@pytest.fixture(scope="module")
def sample() -> list[dict]:
    if not DATA.exists():
        pytest.skip(f"MBPP data not found at {DATA}")
    problems = json.loads(DATA.read_text())
    return random.Random(0).sample(problems, 40)


@pytest.fixture(scope="module")
def sandbox():
    box = make_sandbox("local")
    yield box
    box.close()


def test_reference_solutions_pass(sample, sandbox):
    failed = {}
    for p in sample:
        v = score_code(f"```python\n{p['code']}\n```", _params(p), sandbox, LIMITS)
        if v.outcome != "ok":
            failed[p["task_id"]] = v.detail
        assert v.components["tests_total"] == len(p["test_list"])
    assert failed == {}


def test_stub_solutions_fail_every_assert(sample, sandbox):
    for p in sample[:8]:
        e = _entry_point(p)
        v = score_code(f"```python\ndef {e}(*args):\n    return None\n```", _params(p), sandbox, LIMITS)
        assert (v.outcome, v.reward, v.components["tests_passed"]) == ("wrong", 0.0, 0.0), p["task_id"]


def test_truth_asserts_and_modules_only_the_program_imported(sandbox):
    # MBPP 737 / 596 forms: a truthy re.Match, and test code using ``sys``
    # that only the program imported.
    program = ("import re, sys\ndef check_str(s):\n    return re.search('^[aeiou]', s)\n"
               "def size(t):\n    return sys.getsizeof(t)\n")
    asserts = ["assert check_str('annie')", "assert not check_str('dawood')",
               "assert size((1, 'a')) == sys.getsizeof((1, 'a'))"]
    params = msgspec.convert({"tests": {"entry_point": "check_str", "asserts": asserts}}, CodeParams)
    v = score_code(f"```python\n{program}```", params, sandbox, LIMITS)
    assert (v.outcome, v.reward) == ("ok", 1.0), v.detail
    v = score_code("```python\ndef check_str(s):\n    return None\n```", params, sandbox, LIMITS)
    assert v.components["tests_passed"] == 1.0  # only ``assert not ...`` holds
