"""HumanEval through the local sandbox: every canonical solution passes, and
broken variants (``return None``, a renamed entry point, off by one) fail."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import msgspec
import pytest

from rlvr.verify.code import CodeParams, score_code
from rlvr.sandbox import SandboxLimits, make_sandbox

DATA = Path(__file__).resolve().parents[2] / "data" / "humaneval" / "HumanEval.jsonl.gz"
LIMITS = SandboxLimits(wall_s=20.0, cpu_s=20)
# Problems whose functions return ints, so "+1 on the result" must fail.
OFF_BY_ONE = ["HumanEval/13", "HumanEval/24", "HumanEval/36", "HumanEval/39", "HumanEval/46",
              "HumanEval/55", "HumanEval/59", "HumanEval/63", "HumanEval/83", "HumanEval/84"]


def _problems() -> list[dict]:
    if not DATA.exists():
        pytest.skip(f"HumanEval data not found at {DATA}")
    with gzip.open(DATA, "rt") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def problems() -> dict[str, dict]:
    return {p["task_id"]: p for p in _problems()}


@pytest.fixture(scope="module")
def sandbox():
    box = make_sandbox("local")
    yield box
    box.close()


def _params(p: dict) -> CodeParams:
    return msgspec.convert({"tests": {"check": p["test"], "entry_point": p["entry_point"]}, "mode": "all_or_nothing"}, CodeParams)


def _fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


def test_all_canonical_solutions_pass(problems, sandbox):
    failed = {}
    for tid, p in problems.items():
        v = score_code(_fenced(p["prompt"] + p["canonical_solution"]), _params(p), sandbox, LIMITS)
        if v.outcome != "ok" or v.reward != 1.0:
            failed[tid] = (v.outcome, v.detail)
    assert len(problems) == 164
    assert failed == {}


def test_return_none_variants_fail(problems, sandbox):
    passed = [tid for tid, p in problems.items()
              if score_code(_fenced(p["prompt"] + "    return None\n"), _params(p), sandbox, LIMITS).reward > 0]
    assert passed == []


def test_wrong_entry_point_variants_fail(problems, sandbox):
    passed = []
    for tid in random.Random(0).sample(sorted(problems), 40):  # a sample keeps the file under a minute
        p = problems[tid]
        e = p["entry_point"]
        code = (p["prompt"] + p["canonical_solution"]).replace(f"def {e}(", f"def {e}_v2(")
        v = score_code(_fenced(code), _params(p), sandbox, LIMITS)
        if v.reward > 0 or v.outcome != "wrong":
            passed.append(tid)
    assert passed == []


def test_off_by_one_variants_fail(problems, sandbox):
    for tid in OFF_BY_ONE:
        p = problems[tid]
        e = p["entry_point"]
        code = (p["prompt"] + p["canonical_solution"]
                + f"\n_orig = {e}\ndef {e}(*a, **k):\n    return _orig(*a, **k) + 1\n")
        v = score_code(_fenced(code), _params(p), sandbox, LIMITS)
        assert (v.outcome, v.reward) == ("wrong", 0.0), tid
