"""Tests as the sandbox sees them, and judging what comes back: outside it.

``plan_*`` turn a task's tests into the driver's test list (what enters the
sandbox) plus one ``Expect`` per test (what stays here):

- a call test (``cases``, LeetCode/LiveCodeBench ``fn_name`` cases, and every
  assert of the form ``assert f(<literals>) == <literal>``, ``!=``, ``is
  None/True/False``, ``assert f(...)`` or ``assert not f(...)``) enters as the
  function name and its arguments only; the expected value stays here and is
  compared with the returned value (plain data, ``code_wire``) in
  ``judge``. JSON-format cases use ``same_value`` (tuples are lists, numbers
  within 1e-6); assert literals use Python's ``==`` on plain objects, as the
  assert would have;
- a code test (any other assert, HumanEval ``check``) enters as its source and
  runs in the sandbox's driver process, not the candidate's.

``read_records`` accepts only lines whose HMAC verifies under the run's key.

Not covered: running the sandbox and the reward rule (``rlvr.verify.code``).
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
import math
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

from rlvr.verify import code_wire as wire


class Expect(NamedTuple):
    kind: str  # "eq" | "ne" | "is" | "isnot" | "truth" | "json" | "code"
    value: Any = None


class Plan(NamedTuple):
    tests: list[dict]  # the driver's list: enters the sandbox
    expects: list[Expect]  # stays here, one per test


class Records(NamedTuple):
    started: bool
    results: dict[int, tuple[bool, Any]]  # test index -> (ran to the end, info)
    fault: str  # the driver could not run safely (not the program's fault)
    tail: str  # the start of the candidate's own output, for diagnostics


_NO_KWARGS = wire.to_data({})


def call_test(fn: str, args: list, kwargs: dict | None = None, json_only: bool = False) -> dict:
    data_kwargs = wire.to_data(kwargs) if kwargs else _NO_KWARGS
    return {"fn": fn, "args": wire.to_data(list(args)), "kwargs": data_kwargs, "json": json_only, "truth": False}


def _literal(node: ast.AST) -> tuple[bool, Any]:
    try:
        value = ast.literal_eval(node)
        wire.to_data(value)  # it must be able to cross as plain data
        return True, value
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _literal_call(node: ast.AST, entry: str) -> dict | None:
    """The call test for ``entry(<literals>)`` / ``candidate(<literals>)``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (entry, "candidate")):
        return None
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        return None
    parsed = [_literal(a) for a in node.args]
    kw = {k.arg: _literal(k.value) for k in node.keywords}
    if not all(ok for ok, _ in [*parsed, *kw.values()]):
        return None
    return call_test(entry, [v for _, v in parsed], {k: v for k, (_, v) in kw.items()})


def parse_assert(source: str, entry: str) -> tuple[dict, Expect] | None:
    """(call test, expectation) for an assert this module can judge outside,
    else None (the assert then runs as code in the driver)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    test = tree.body[0].test
    # ``assert f(x)`` / ``assert not f(x)`` ask the candidate for the truth
    # value only (a re.Match is truthy): an answer it could give anyway by
    # returning True or False, so nothing is trusted that was not before.
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        call = _literal_call(test.operand, entry)
        return ({**call, "truth": True}, Expect("truth", False)) if call else None
    if isinstance(test, ast.Call):
        call = _literal_call(test, entry)
        return ({**call, "truth": True}, Expect("truth", True)) if call else None
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    op, left, right = test.ops[0], test.left, test.comparators[0]
    if isinstance(op, (ast.Eq, ast.NotEq)):
        call, lit = _literal_call(left, entry), right
        if call is None:
            call, lit = _literal_call(right, entry), left
        ok, value = _literal(lit) if call else (False, None)
        return (call, Expect("eq" if isinstance(op, ast.Eq) else "ne", value)) if ok else None
    if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value in (None, True, False):
        call = _literal_call(left, entry)
        if call and type(right.value) in (bool, type(None)):
            return call, Expect("is" if isinstance(op, ast.Is) else "isnot", right.value)
    return None


def code_test(source: str, check: bool = False) -> dict:
    """A test that runs as code in the driver, with the names it uses (the
    driver binds those the program defines to calls into the candidate)."""
    try:
        names = sorted({n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)})
    except (SyntaxError, ValueError):
        names = []  # the driver reports the syntax error as the test's failure
    return {"code": source, "check": check, "names": names}


def plan_asserts(asserts: list[str], entry: str) -> Plan:
    tests, expects = [], []
    for source in asserts:
        parsed = parse_assert(source, entry)
        test, expect = parsed if parsed else (code_test(source), Expect("code"))
        tests.append(test)
        expects.append(expect)
    return Plan(tests, expects)


def plan_check(check: str) -> Plan:
    return Plan([code_test(check, check=True)], [Expect("code")])


def plan_cases(fn: str, cases: list[tuple[list, dict, Any]]) -> Plan:
    """JSON-format call cases: (args, kwargs, expected JSON value)."""
    return Plan([call_test(fn, a, k, json_only=True) for a, k, _ in cases], [Expect("json", e) for _, _, e in cases])


def functional_args(text: str) -> list:
    """LeetCode/LiveCodeBench functional input: one JSON argument per line."""
    return [json.loads(line) for line in text.strip().splitlines() if line.strip()]


def judge(ok: bool, info: Any, expect: Expect) -> tuple[bool, str]:
    """(passed, why not) of one test's record."""
    if not ok:
        return False, str(info)
    if expect.kind == "code":
        return True, ""
    if not isinstance(info, dict):
        return False, "malformed record"
    if "digest" in info:  # a long value: only exact (canonical) equality is known here
        same = info["digest"] == wire.digest(_canonical(expect))
        passed = {"eq": same, "json": same, "ne": not same, "truth": expect.value is True, "is": False, "isnot": True}[expect.kind]
        return passed, "" if passed else f"got a value of {info.get('bytes')} bytes (sha256 differs)"
    try:
        got = wire.decode(info["value"])
    except (wire.NotPlainError, KeyError, TypeError):
        return False, "malformed record"
    passed = _compare(got, expect)
    return passed, "" if passed else f"got {info['value'][:200]}"


def _canonical(expect: Expect) -> str:
    try:
        return wire.encode(expect.value, json_only=expect.kind == "json")
    except wire.NotPlainError:
        return ""


def _compare(got: Any, expect: Expect) -> bool:
    kind, want = expect
    if kind == "json":
        return same_value(got, want)
    if kind == "truth":
        return bool(got) is want
    if kind == "is":
        return got is want
    if kind == "isnot":
        return got is not want
    try:
        equal = got == want  # both are plain objects built by code_wire / literal_eval
    except RecursionError:
        return False
    return equal if kind == "eq" else not equal


def same_value(got: Any, want: Any) -> bool:
    """JSON-level equality; numbers within 1e-6 relative (bools are not numbers)."""
    if isinstance(want, bool) or isinstance(got, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        if isinstance(want, int) and isinstance(got, int):
            return got == want
        return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(got) == len(want) and all(same_value(g, w) for g, w in zip(got, want))
    if isinstance(want, dict) and isinstance(got, dict):
        return got.keys() == want.keys() and all(same_value(got[k], want[k]) for k in want)
    return type(got) is type(want) and got == want


def same_text(got: str, want: str) -> bool:
    """stdout equality: trailing whitespace per line and blank edges ignored;
    else token by token, where numeric tokens compare as decimals (``1.0`` is
    ``1``, ``0.50`` is ``0.5``)."""
    g = [line.rstrip() for line in got.strip().splitlines()]
    w = [line.rstrip() for line in want.strip().splitlines()]
    if g == w:
        return True
    if len(g) != len(w):
        return False
    for gl, wl in zip(g, w):
        gt, wt = gl.split(), wl.split()
        if len(gt) != len(wt) or not all(a == b or _same_number(a, b) for a, b in zip(gt, wt)):
            return False
    return True


def _same_number(a: str, b: str) -> bool:
    try:
        x, y = Decimal(a), Decimal(b)
    except InvalidOperation:
        return False
    return x.is_finite() and y.is_finite() and x == y


def read_records(stdout: str, key: bytes) -> Records:
    """The driver's records: lines whose HMAC verifies under ``key``; the
    first record per test index counts."""
    started, results, fault, tail = False, {}, "", ""
    for line in stdout.splitlines():
        mac, _, body = line.partition(" ")
        if len(mac) != 64:
            continue
        want = hmac.new(key, body.encode("utf-8", "replace"), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac.encode("utf-8", "replace"), want.encode()):
            continue
        try:
            kind, i, ok, info = json.loads(body)
        except (ValueError, TypeError):
            continue
        if kind == "start":
            started = True
        elif kind == "fault":
            fault = str(info)
        elif kind == "done":
            tail = str(info)
        elif kind == "test" and isinstance(i, int) and i not in results:
            results[i] = (ok is True, info)
    return Records(started, results, fault, tail)


__all__ = [
    "Expect",
    "Plan",
    "Records",
    "call_test",
    "code_test",
    "functional_args",
    "judge",
    "parse_assert",
    "plan_asserts",
    "plan_cases",
    "plan_check",
    "read_records",
    "same_text",
    "same_value",
]
