"""The LeetCode / LiveCodeBench functional format (``fn_name``: JSON-lines
inputs, a JSON output, ``class Solution`` or a bare function, the names
LiveCodeBench pre-imports), through ``score_code`` and through the audit
command on labelled cases written for this project from public problem
statements (``data/code_lcb_cases.jsonl``: a correct and a subtly wrong
solution per problem)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from rlvr.cli.main import main
from rlvr.verify.code import CodeParams, score_code
from rlvr.sandbox import SandboxLimits, make_sandbox

CASES = Path(__file__).parent / "data" / "code_lcb_cases.jsonl"
LIMITS = SandboxLimits(wall_s=10.0)


@pytest.fixture(scope="module")
def sandbox():
    box = make_sandbox("local")
    yield box
    box.close()


def _p(**kw) -> CodeParams:
    return msgspec.convert(kw, CodeParams)


def _case(*args, out) -> dict:
    return {"input": "\n".join(json.dumps(a) for a in args), "output": json.dumps(out)}


def test_labelled_lcb_cases_agree_through_the_audit_command(tmp_path, capsys):
    out = tmp_path / "verdicts.jsonl"
    code = main(["audit", "--verifier", "code", "--input", str(CASES), "--output", str(out), "--json",
                 "--max-fn-rate", "0", "--max-fp-rate", "0", "--timeout-s", "60"])
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (summary["false_negatives"], summary["false_positives"], summary["spec_errors"]) == ([], [], [])
    assert code == 0 and summary["labelled"] == summary["cases"] >= 30 and summary["agreement"] == 1.0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["outcome"] for r in rows} <= {"ok", "wrong"}


def test_solution_method_bare_function_and_preimported_names(sandbox):
    tests = [_case([3, 1, 2], 2, out=[3, 2]), _case([5], 1, out=[5])]
    method = ("class Solution:\n    def top(self, nums: List[int], k: int) -> List[int]:\n"
              "        return nlargest(k, nums)\n")
    bare = "def top(nums: List[int], k: int) -> Optional[List[int]]:\n    return sorted(nums, reverse=True)[:k]\n"
    for program in (method, bare):
        v = score_code(f"```python\n{program}```", _p(tests=tests, fn_name="top"), sandbox, LIMITS)
        assert (v.outcome, v.reward) == ("ok", 1.0), v.detail


def test_a_tuple_equals_a_json_list_but_a_set_is_not_plain_data(sandbox):
    tests = [_case(2, out=[0, 1])]
    v = score_code("```python\ndef f(n):\n    return tuple(range(n))\n```", _p(tests=tests, fn_name="f"), sandbox, LIMITS)
    assert v.outcome == "ok"
    v = score_code("```python\ndef f(n):\n    return set(range(n))\n```", _p(tests=tests, fn_name="f"), sandbox, LIMITS)
    assert (v.outcome, v.reward) == ("wrong", 0.0) and "not plain data: set" in v.detail


def test_each_case_gets_a_fresh_solution_and_main_blocks_do_not_run(sandbox):
    program = ("class Solution:\n    def __init__(self):\n        self.seen = []\n"
               "    def count(self, x: int) -> int:\n        self.seen.append(x)\n        return len(self.seen)\n"
               "if __name__ == '__main__':\n    print(Solution().count(1))\n    raise SystemExit(3)\n")
    tests = [_case(7, out=1), _case(8, out=1), _case(9, out=1)]
    v = score_code(f"```python\n{program}```", _p(tests=tests, fn_name="count"), sandbox, LIMITS)
    assert (v.outcome, v.reward) == ("ok", 1.0), v.detail


def test_numbers_compare_within_tolerance_and_bools_are_not_numbers(sandbox):
    tests = [_case(1, 3, out=0.333333333), _case(2, 2, out=1)]
    v = score_code("```python\ndef div(a, b):\n    return a / b\n```", _p(tests=tests, fn_name="div"), sandbox, LIMITS)
    assert v.outcome == "ok"
    v = score_code("```python\ndef div(a, b):\n    return a == b\n```", _p(tests=[_case(2, 2, out=1)], fn_name="div"),
                   sandbox, LIMITS)
    assert v.outcome == "wrong"


def test_stdin_programs_see_the_same_names_and_keep_future_imports(sandbox):
    program = "from __future__ import annotations\nxs: List[int] = list(map(int, input().split()))\nprint(max(accumulate(xs)))\n"
    v = score_code(f"```python\n{program}```", _p(tests=[{"input": "1 -2 5\n", "output": "4\n"}]), sandbox, LIMITS)
    assert (v.outcome, v.reward) == ("ok", 1.0), v.detail


def test_bad_functional_params_name_the_field():
    with pytest.raises(msgspec.ValidationError, match=r"tests\[1\]\.input"):
        _p(tests=[_case(1, out=1), {"input": "[1, 2\n3", "output": "1"}], fn_name="f")
    with pytest.raises(msgspec.ValidationError, match=r"tests\[0\]\.output"):
        _p(tests=[{"input": "1", "output": "not json"}], fn_name="f")
    with pytest.raises(msgspec.ValidationError, match="need fn_name"):
        _p(tests=[{"input": "1", "output": "1", "testtype": "functional"}])
    with pytest.raises(msgspec.ValidationError, match="fn_name"):
        _p(tests=[_case(1, out=1)], fn_name="not a name")
    with pytest.raises(msgspec.ValidationError, match="fn_name goes with"):
        _p(tests={"entry_point": "f", "asserts": ["assert f() == 1"]}, fn_name="f")


def test_a_training_task_spec_resolves_to_typed_params_and_scores():
    from rlvr.protocol.tasks import VerifierSpec
    from rlvr.verify.registry import VerifierSpecError, VerifyContext, resolve

    tests = [_case([2, 7, 11, 15], 9, out=[0, 1])]
    bound = resolve(VerifierSpec(name="code", params={"tests": tests, "fn_name": "twoSum"}))
    assert isinstance(bound.params, CodeParams) and bound.params.fn_name == "twoSum"
    program = ("class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
               "        seen = {}\n        for i, x in enumerate(nums):\n"
               "            if target - x in seen:\n                return [seen[target - x], i]\n"
               "            seen[x] = i\n")
    v = bound(f"```python\n{program}```", VerifyContext())
    assert (v.outcome, v.reward, v.verifier) == ("ok", 1.0, "code"), v.detail
    with pytest.raises(VerifierSpecError, match=r"tests\[0\]\.output"):
        resolve(VerifierSpec(name="code", params={"tests": [{"input": "1", "output": "[1,"}], "fn_name": "f"}))
