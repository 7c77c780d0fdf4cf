"""Program extraction, typed parameters, and the reward / outcome rules of
``score_code`` for each test style."""

from __future__ import annotations

import msgspec
import pytest

from rlvr.verify.code import CodeParams, extract_program, score_code
from rlvr.sandbox import ExecutionResult, SandboxLimits, make_sandbox

LIMITS = SandboxLimits(wall_s=10.0)
ADD = "```python\ndef add(a, b):\n    return a + b\n```"


@pytest.fixture(scope="module")
def sandbox():
    box = make_sandbox("local")
    yield box
    box.close()


def _p(**kw) -> CodeParams:
    return msgspec.convert(kw, CodeParams)


def test_extract_takes_the_last_python_block():
    text = "```python\nx = 1\n```\nthen\n```\nplain\n```\n```py\nx = 2\n```\nbye"
    assert extract_program(text).strip() == "x = 2"


def test_extract_falls_back_to_any_block_then_whole_text():
    assert extract_program("a\n```\ny = 3\n```").strip() == "y = 3"
    assert extract_program("print(1)") == "print(1)"
    assert extract_program("```python\nz = 1\n```\n```python\ncut off").strip() == "cut off"


def test_params_reject_unknown_keys_and_ambiguous_call_tests():
    with pytest.raises(msgspec.ValidationError, match="nope"):
        _p(tests=[{"input": "", "output": ""}], nope=1)
    with pytest.raises(msgspec.ValidationError, match="exactly one"):
        _p(tests={"entry_point": "f", "asserts": ["assert f()"], "check": "def check(c): pass"})
    with pytest.raises(msgspec.ValidationError):
        _p(tests={"entry_point": "f"})


def test_stdin_stdout_cases_score_the_fraction(sandbox):
    prog = "```python\nn = int(input())\nprint(n * 2 if n < 5 else n)\n```"
    tests = [{"input": f"{n}\n", "output": f"{2 * n}\n"} for n in (1, 2, 3, 7)]
    v = score_code(prog, _p(tests=tests), sandbox, LIMITS)
    assert (v.outcome, v.reward, v.verifier) == ("wrong", 0.75, "code")
    assert v.components == {"accuracy": 0.75, "tests_passed": 3.0, "tests_total": 4.0}
    v = score_code(prog, _p(tests=tests, mode="all_or_nothing"), sandbox, LIMITS)
    assert (v.outcome, v.reward) == ("wrong", 0.0)
    assert score_code(prog, _p(tests=tests[:3]), sandbox, LIMITS).outcome == "ok"


def test_call_cases_compare_return_values_outside_the_sandbox(sandbox):
    cases = [{"args": [1, 2], "expected": 3}, {"args": [0.1, 0.2], "expected": 0.3}, {"args": [[1], [2]], "expected": [1, 2]},
             {"args": [1, 1], "expected": 3}]
    v = score_code(ADD, _p(tests={"entry_point": "add", "cases": cases}), sandbox, LIMITS)
    assert (v.outcome, v.components["tests_passed"], v.components["tests_total"]) == ("wrong", 3.0, 4.0)


def test_asserts_with_setup_all_pass(sandbox):
    tests = {"entry_point": "add", "asserts": ["assert add(1, 2) == 3", "assert math.isclose(add(0.1, 0.2), 0.3)"]}
    v = score_code(ADD, _p(tests=tests, setup="import math"), sandbox, LIMITS)
    assert (v.outcome, v.reward) == ("ok", 1.0)


def test_syntax_error_and_empty_response_are_not_passes(sandbox):
    tests = {"entry_point": "add", "asserts": ["assert add(1, 2) == 3"]}
    v = score_code("```python\ndef add(a, b) return\n```", _p(tests=tests), sandbox, LIMITS)
    assert (v.outcome, v.reward) == ("wrong", 0.0) and "SyntaxError" in v.detail
    assert score_code("   ", _p(tests=tests), sandbox, LIMITS).outcome == "parse_error"


class _BrokenSandbox:
    def run(self, files, argv, stdin, limits):
        return ExecutionResult(None, "", "", False, False, False, 0.0, error="bwrap: cannot create namespace")

    def close(self):
        pass


class _SilentSandbox:
    """Runs nothing and reports a clean exit: the runner's start record is missing."""

    def run(self, files, argv, stdin, limits):
        return ExecutionResult(0, "", "", False, False, False, 0.0)

    def close(self):
        pass


def test_sandbox_failures_are_sandbox_errors_not_wrong_answers():
    tests = {"entry_point": "add", "asserts": ["assert add(1, 2) == 3"]}
    for box in (_BrokenSandbox(), _SilentSandbox()):
        v = score_code(ADD, _p(tests=tests), box, LIMITS)
        assert (v.outcome, v.reward) == ("sandbox_error", 0.0)
    v = score_code(ADD, _p(tests=[{"input": "", "output": "3"}]), _BrokenSandbox(), LIMITS)
    assert v.outcome == "sandbox_error"
