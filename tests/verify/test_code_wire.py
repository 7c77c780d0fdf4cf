"""What crosses the sandbox boundary: the plain-data codec, which asserts are
judged outside, HMAC'd records, and that expected values never enter."""

from __future__ import annotations

import hashlib
import hmac
import json
import math

import msgspec
import pytest

from rlvr.verify import code_tests
from rlvr.verify import code_wire as wire
from rlvr.verify.code import CodeParams, score_code
from rlvr.sandbox import SandboxLimits, make_sandbox


def test_plain_values_round_trip_with_their_types():
    values = [None, True, 0, -(10**5000), 1.5, math.inf, "é", [1, (2, 3)], {"a": 1, (1, 2): {3}},
              frozenset({1}), 1 + 2j, b"\x00\xff", {"b": 2, "a": 1}]
    for v in values:
        back = wire.decode(wire.encode(v))
        assert back == v and type(back) is type(v)
    assert list(wire.decode(wire.encode({"b": 2, "a": 1}, canonical=False))) == ["b", "a"]  # order kept for arguments
    assert math.isnan(wire.decode(wire.encode(math.nan)))


def test_anything_else_is_not_plain_data():
    class LyingInt(int):
        def __eq__(self, other):
            return True

    for v in (LyingInt(1), object(), [iter([])], {1: print}, range(3)):
        with pytest.raises(wire.NotPlainError):
            wire.encode(v)
    with pytest.raises(wire.NotPlainError, match="nested deeper"):
        deep: list = []
        for _ in range(200):
            deep = [deep]
        wire.encode(deep)
    for text in ('{"x": 1}', '{"t": 1}', '{"d": [[[1], 2]]}', '{"i": "zz"}', "[1,", '{"f": "1e3"}'):
        with pytest.raises(wire.NotPlainError):
            wire.decode(text)


def test_json_rule_turns_tuples_into_lists_and_refuses_the_rest():
    assert wire.to_json_plain((1, [2, (3,)])) == [1, [2, [3]]]
    for v in ({1, 2}, {1: "a"}, b"x", 1j):
        with pytest.raises(wire.NotPlainError):
            wire.encode(v, json_only=True)
    assert wire.encode({"b": 1, "a": 2}) == wire.encode({"a": 2, "b": 1})  # canonical: equal values, one digest


def test_literal_asserts_are_judged_outside_and_the_rest_run_as_code():
    plan = code_tests.plan_asserts([
        "assert f(1, [2]) == (3, 4)", "assert (5) == f(x=1)", "assert not f('a')", "assert f(0) is None",
        "assert f(1) != 2", "assert math.isclose(f(1), 2.0)", "assert f(1 + 1) == 2", "assert set(f(1)) == {1}",
    ], "f")
    kinds = [e.kind for e in plan.expects]
    assert kinds == ["eq", "eq", "truth", "is", "ne", "code", "code", "code"]
    assert plan.expects[0].value == (3, 4) and "code" not in plan.tests[0]
    assert plan.tests[5]["names"] == ["f", "math"]
    assert code_tests.judge(True, {"value": wire.encode([3, 4])}, plan.expects[0]) == (False, "got [3,4]")
    assert code_tests.judge(True, {"value": wire.encode((3, 4))}, plan.expects[0])[0]
    long = {"digest": wire.digest(wire.encode((3, 4))), "bytes": 9}
    assert code_tests.judge(True, long, plan.expects[0])[0]


def test_only_records_with_the_runs_hmac_count():
    key = b"k" * 32

    def rec(*payload, k=key):
        body = json.dumps(list(payload))
        return hmac.new(k, body.encode(), hashlib.sha256).hexdigest() + " " + body

    out = "\n".join([rec("start", -1, True, ""), rec("test", 0, True, "", k=b"x" * 32), "junk " + json.dumps(["test", 1, True, ""]),
                     rec("test", 1, False, "boom"), rec("test", 1, True, ""), rec("test", 2, True, "")])
    r = code_tests.read_records(out, key)
    assert r.started and r.results == {1: (False, "boom"), 2: (True, "")}


class _Recording:
    """The real local sandbox, remembering every file and stdin it was given."""

    def __init__(self):
        self.box = make_sandbox("local")
        self.seen = []

    def run(self, files, argv, stdin, limits):
        self.seen.append(json.dumps(files) + stdin)
        return self.box.run(files, argv, stdin, limits)

    def close(self):
        self.box.close()


def test_expected_values_never_enter_the_sandbox():
    box = _Recording()
    secret = 918273645
    program = f"```python\ndef f(x):\n    return x + {secret - 1}\nclass Solution:\n    def f(self, x):\n        return f(x)\n```"
    formats = [
        {"tests": {"entry_point": "f", "asserts": [f"assert f(1) == {secret}", f"assert {secret} == candidate(x=1)"]}},
        {"tests": {"entry_point": "f", "cases": [{"args": [1], "expected": secret}]}},
        {"tests": [{"input": "1", "output": str(secret)}], "fn_name": "f"},
    ]
    try:
        for params in formats:
            v = score_code(program, msgspec.convert(params, CodeParams), box, SandboxLimits(wall_s=10.0))
            assert v.outcome == "ok", v.detail
        stdin_program = "```python\nprint(int(input()) * 2)\n```"
        v = score_code(stdin_program, msgspec.convert({"tests": [{"input": "4", "output": str(secret)}]}, CodeParams),
                       box, SandboxLimits(wall_s=10.0))
        assert v.outcome == "wrong"
    finally:
        box.close()
    assert len(box.seen) == 4
    assert not any(str(secret) in s for s in box.seen)


def test_a_driver_that_cannot_become_non_dumpable_runs_nothing(monkeypatch):
    from rlvr.verify import code

    broken = code._HARNESS["driver.py"].replace(
        "def harden() -> None:\n", "def harden() -> None:\n    raise OSError(1, 'prctl refused')\n")
    monkeypatch.setitem(code._HARNESS, "driver.py", broken)
    box = make_sandbox("local")
    try:
        params = msgspec.convert({"tests": {"entry_point": "f", "asserts": ["assert f() == 1"]}}, CodeParams)
        v = score_code("```python\ndef f():\n    return 1\n```", params, box, SandboxLimits(wall_s=10.0))
    finally:
        box.close()
    assert (v.outcome, v.reward) == ("sandbox_error", 0.0) and "non-dumpable" in v.detail
