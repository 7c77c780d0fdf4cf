"""The code verifier: run a response's program against tests in a sandbox.

Test formats (``CodeParams``):
- stdin/stdout: ``tests`` is a list of ``{"input", "output"}``; one sandbox
  run per case, stdout compared here (``code_tests.same_text``), exit 0 needed;
- LeetCode / LiveCodeBench functional: the same list plus ``fn_name``; each
  input line is one JSON argument, the output one JSON value. The program
  defines ``class Solution`` with that method (a fresh instance per case) or
  a bare function. A returned tuple equals a JSON list;
- call-based, ``tests = {"entry_point", ...}`` with exactly one of
  ``asserts`` (MBPP), ``cases`` (``args`` -> ``expected``, JSON) or ``check``
  (HumanEval code defining ``check(candidate)``, one test).
Programs see the names LiveCodeBench pre-imports (``code_child.PRELUDE``:
typing's ``List``/``Optional``/..., collections, heapq, math, itertools,
functools, bisect and their usual names) without importing them.

Design: a comparison never runs in the program's process.
- Call tests (``cases``, ``fn_name`` cases, and every MBPP assert of the form
  ``assert f(<literals>) == <literal>``, parsed with ``ast``): only the
  function name and the arguments enter the sandbox. The return value comes
  out as plain data (``code_wire``: None/bool/int/float/str/list/tuple/dict/
  set, decoded into fresh objects; JSON formats also turn tuples into lists
  and refuse the rest) and is compared here, in the verifier worker, against
  an expected value that never entered the sandbox. ``assert f(x)`` and
  ``assert not f(x)`` ask for the truth value alone (a ``re.Match`` is
  truthy): an answer the program could give anyway by returning a bool.
- Code tests (any other assert, HumanEval ``check``): the test code runs in a
  separate trusted driver process in the sandbox (``code_driver``), against
  ``Remote`` callables that forward each call over a pipe to the candidate's
  process (``code_child``) and return fresh plain objects (a module the test
  uses but only the program imported, ``sys`` say, is the driver's own
  import of the same name). Asserts there are compiled at ``optimize=0`` by
  a driver started with ``-I`` (no ``PYTHONOPTIMIZE``).
- stdin/stdout: the expected output never enters the sandbox.

What the candidate's process can reach, and why it does not help:
- its own memory (frames, tracebacks, ``gc``, builtins, ``sys.modules``, the
  child harness): none of it holds an expected value, a test or the record
  key. Patching anything there changes only what it returns, and what it
  returns is data compared elsewhere;
- the driver: the driver is non-dumpable before the candidate exists, so
  ptrace, ``process_vm_readv`` and ``/proc/<driver>/{mem,fd,environ}`` are
  refused; it shares no memory or file descriptor with the candidate but the
  two call pipes, whose contents it parses as untrusted bytes (size-capped).
  The candidate may kill or stop it: then records are missing, and a
  missing record is a failed test (a timeout when the wall clock ran out);
- the result channel: the driver's records are lines on the sandbox's stdout,
  each carrying an HMAC-SHA256 under a 256-bit key drawn here per run and
  read by the driver from stdin before the candidate starts. The candidate
  does not hold that stdout; printing, or even writing to that pipe through
  some other process's ``/proc/<pid>/fd/1``, yields lines without a valid
  HMAC, which ``read_records`` ignores. Reading records back teaches nothing
  about the key;
- files: the sandbox's work dir holds the program, the harness sources
  (public) and the MBPP setup line; the tests arrive on stdin and stay in the
  driver's memory. The driver's ``sys.path`` is the read-only standard
  library alone (``-I -S``; the work dir and ``/tmp`` removed), so a module
  file the program plants is never imported there, whenever test code
  imports;
- exits and exceptions: ``sys.exit``, ``os._exit``, ``KeyboardInterrupt``,
  ``GeneratorExit`` or any ``BaseException`` at import or in a call are a
  failed load or a failed call; the driver maps only ordinary builtin
  exceptions back into test code, and a fault no test code can swallow fails
  the test it happened in. Sleeping runs into the sandbox's wall clock:
  outcome ``timeout``, the unfinished tests failed.
Limits of the argument: a HumanEval test that calls another function of the
program (``poly`` in HumanEval/32, ``encode_cyclic`` in /38) trusts that
function as the original harness did; a value longer than 64 KiB is compared
by sha256 of its canonical form (exact, without the float tolerance);
arguments cross as plain data too, so a test that passes a function or an
object to the program fails, and a program that mutates an argument in place
is not seen by the test code.

Not covered: languages other than Python, and the worker pool / timeout
around this call (the verifier runtime owns that).
"""

from __future__ import annotations

import json
import re
import secrets
import time
from pathlib import Path
from typing import Any, Literal

import msgspec

from rlvr.protocol import Verdict
from rlvr.verify import code_tests
from rlvr.sandbox.base import ExecutionResult, Sandbox, SandboxLimits

_HERE = Path(__file__).resolve().parent
_HARNESS = {
    "driver.py": (_HERE / "code_driver.py").read_text(encoding="utf-8"),
    "child.py": (_HERE / "code_child.py").read_text(encoding="utf-8"),
    "wire.py": (_HERE / "code_wire.py").read_text(encoding="utf-8"),
}
_INLINE_BUDGET = 1 << 20  # bytes of return values the driver may record verbatim


class IOCase(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    input: str
    output: str
    testtype: Literal["stdin", "functional"] | None = None  # LiveCodeBench's own field


class ArgsCase(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    args: list[Any]
    expected: Any
    kwargs: dict[str, Any] = {}


class CallTests(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Call-based tests: exactly one of ``asserts``, ``cases``, ``check``."""

    entry_point: str
    asserts: list[str] | None = None
    cases: list[ArgsCase] | None = None
    check: str | None = None

    def __post_init__(self) -> None:
        given = [k for k in ("asserts", "cases", "check") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"call tests need exactly one of asserts/cases/check, got {given or 'none'}")
        if not self.entry_point.isidentifier():
            raise ValueError(f"entry_point {self.entry_point!r} is not an identifier")


class CodeParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tests: list[IOCase] | CallTests
    mode: Literal["fraction", "all_or_nothing"] = "fraction"
    setup: str = ""  # run before the program (and the test code): MBPP test_setup_code / test_imports
    language: Literal["python"] = "python"
    # LeetCode / LiveCodeBench functional format: the ``tests`` list holds
    # JSON-lines inputs and JSON outputs for ``Solution().<fn_name>``.
    fn_name: str | None = None

    def __post_init__(self) -> None:
        if self.fn_name is None:
            if isinstance(self.tests, list) and any(c.testtype == "functional" for c in self.tests):
                raise ValueError("functional test cases need fn_name")
            return
        if not self.fn_name.isidentifier():
            raise ValueError(f"fn_name {self.fn_name!r} is not an identifier")
        if not isinstance(self.tests, list):
            raise ValueError("fn_name goes with a list of {input, output} cases, not call tests")
        for i, case in enumerate(self.tests):
            if case.testtype == "stdin":
                raise ValueError(f"tests[{i}] is a stdin case but fn_name asks for functional ones")
            try:
                code_tests.functional_args(case.input)
            except ValueError as e:
                raise ValueError(f"tests[{i}].input: a line is not JSON ({e})") from None
            try:
                json.loads(case.output)
            except ValueError as e:
                raise ValueError(f"tests[{i}].output is not JSON ({e})") from None


_FENCE = re.compile(r"```([^\n`]*)\n(.*?)```", re.DOTALL)
_OPEN_PY = re.compile(r"```(?:python3?|py)[ \t]*\n", re.IGNORECASE)
_PY_TAGS = ("python", "python3", "py")


def extract_program(response: str) -> str:
    """The last ```python block; else a trailing unclosed ```python block;
    else the last fenced block of any tag; else the whole text."""
    blocks = [(m.group(1).strip().lower(), m.group(2), m.end()) for m in _FENCE.finditer(response)]
    py = [b for b in blocks if b[0] in _PY_TAGS]
    last_end = blocks[-1][2] if blocks else 0
    tail = list(_OPEN_PY.finditer(response, last_end))
    if tail:
        return response[tail[-1].end() :]
    if py:
        return py[-1][1]
    if blocks:
        return blocks[-1][1]
    return response


def score_code(response: str, params: CodeParams, sandbox: Sandbox, limits: SandboxLimits) -> Verdict:
    t0 = time.monotonic()
    program = extract_program(response)
    if not program.strip():
        return _verdict(0, _count(params), "parse_error", params, program, t0, "no program in the response")
    if isinstance(params.tests, list) and params.fn_name is None:
        passed, total, outcome, detail = _run_io(program, params, sandbox, limits)
    else:
        plan, entry = _plan(params)
        passed, total, outcome, detail = _run_calls(program, plan, entry, params, sandbox, limits)
    return _verdict(passed, total, outcome, params, program, t0, detail)


def _plan(params: CodeParams) -> tuple[code_tests.Plan, str]:
    t = params.tests
    if isinstance(t, list):
        fn = params.fn_name or ""
        cases = [(code_tests.functional_args(c.input), {}, json.loads(c.output)) for c in t]
        return code_tests.plan_cases(fn, cases), fn
    if t.check is not None:
        return code_tests.plan_check(t.check), t.entry_point
    if t.asserts is not None:
        return code_tests.plan_asserts(t.asserts, t.entry_point), t.entry_point
    cases = [(c.args, c.kwargs, c.expected) for c in t.cases or []]
    return code_tests.plan_cases(t.entry_point, cases), t.entry_point


def _count(params: CodeParams) -> int:
    t = params.tests
    if isinstance(t, list):
        return len(t)
    return 1 if t.check is not None else len(t.asserts if t.asserts is not None else t.cases or [])


def _verdict(passed: int, total: int, outcome: str, params: CodeParams, program: str, t0: float, detail: str) -> Verdict:
    if outcome == "sandbox_error":
        reward = 0.0
    elif params.mode == "all_or_nothing":
        reward = 1.0 if total and passed == total else 0.0
    else:
        reward = passed / total if total else 0.0
    return Verdict(
        reward=reward,
        outcome=outcome,  # type: ignore[arg-type]
        verifier="code",
        components={"accuracy": reward, "tests_passed": float(passed), "tests_total": float(total)},
        extracted=program[:4096],
        latency_s=time.monotonic() - t0,
        detail=detail[:1000],
    )


def _run_io(program: str, params: CodeParams, sandbox: Sandbox, limits: SandboxLimits) -> tuple[int, int, str, str]:
    cases = params.tests
    assert isinstance(cases, list)
    files = {"child.py": _HARNESS["child.py"], "setup.py": params.setup, "solution.py": program}
    passed, timed_out, first_fail = 0, False, ""
    for i, case in enumerate(cases):
        res = sandbox.run(files, ["python3", "-I", "child.py", "--main"], case.input, limits)
        if res.error:
            return passed, len(cases), "sandbox_error", res.error
        ok = res.exit_code == 0 and not res.timed_out and not res.output_truncated and code_tests.same_text(res.stdout, case.output)
        passed += ok
        timed_out = timed_out or res.timed_out
        if not ok:
            first_fail = first_fail or f"case {i}: {_why(res) if res.exit_code != 0 or res.timed_out else 'wrong output'}"
            if params.mode == "all_or_nothing":
                break
    outcome = "ok" if passed == len(cases) else "timeout" if timed_out else "wrong"
    return passed, len(cases), outcome, first_fail


def _run_calls(
    program: str, plan: code_tests.Plan, entry: str, params: CodeParams, sandbox: Sandbox, limits: SandboxLimits
) -> tuple[int, int, str, str]:
    total = len(plan.tests)
    key = secrets.token_bytes(32)
    spec = {"setup": params.setup, "entry": entry, "class_first": params.fn_name is not None,
            "tests": plan.tests, "inline_budget": _INLINE_BUDGET, "output_cap": limits.output_bytes}
    stdin = key.hex() + "\n" + json.dumps(spec)
    # The run's stdout is the driver's alone (the candidate's prints go to a
    # pipe the driver caps), so room for every record is safe to grant.
    out_cap = max(limits.output_bytes, _INLINE_BUDGET + 2048 * (total + 4))
    run_limits = msgspec.structs.replace(limits, output_bytes=out_cap)
    files = {**_HARNESS, "solution.py": program}
    res = sandbox.run(files, ["python3", "-I", "-S", "driver.py"], stdin, run_limits)
    if res.error:
        return 0, total, "sandbox_error", res.error
    rec = code_tests.read_records(res.stdout, key)
    if rec.fault:
        return 0, total, "sandbox_error", rec.fault
    if not rec.started:
        if res.timed_out:
            return 0, total, "timeout", _why(res)
        return 0, total, "sandbox_error", f"the test driver never started: {_why(res)}"
    passed, first_fail = 0, ""
    for i, expect in enumerate(plan.expects):
        if i in rec.results:
            ok, why = code_tests.judge(*rec.results[i], expect)
        else:
            ok, why = False, f"no result, the run ended first ({_why(res)})"
        passed += ok
        if not ok and not first_fail:
            first_fail = f"test {i}: {why}" + (f" | output: {rec.tail[:300]}" if rec.tail.strip() else "")
    outcome = "ok" if passed == total else "timeout" if res.timed_out else "wrong"
    return passed, total, outcome, first_fail


def _why(res: ExecutionResult) -> str:
    if res.timed_out:
        return f"timed out after {res.wall_s:.1f}s"
    if res.memory_exceeded:
        return "memory limit exceeded"
    if res.output_truncated:
        return "output limit exceeded"
    tail = res.stderr.strip().splitlines()[-1:] or [""]
    return f"exit {res.exit_code}: {tail[0][:300]}"


__all__ = ["ArgsCase", "CallTests", "CodeParams", "IOCase", "extract_program", "score_code"]
