"""The code verifier: run a response's program against tests in a sandbox.

Test styles (``CodeParams.tests``):
- stdin/stdout: a list of ``{"input", "output"}``; one sandbox run per case,
  the program's stdout compared here (trailing whitespace per line and
  trailing blank lines ignored) and exit status 0 required;
- call-based, ``{"entry_point", ...}`` with exactly one of
  ``asserts`` (MBPP-style assert lines), ``cases`` (``args`` -> ``expected``,
  compared here) or ``check`` (HumanEval test code defining
  ``check(candidate)``, one test). All tests of a problem run in one sandbox
  process through a trusted runner (``_RUNNER``).

Why a pass cannot be faked by exiting early or killing the parent:
- The verdict never comes from an exit status or from anything the program
  prints. Each test's result is a record on a private channel (a dup of the
  original stdout taken before the program is loaded; the program's own
  stdout goes to stderr). A record counts only if it starts with a 128-bit
  nonce drawn here per run and handed to the runner on stdin, which it reads
  before the program exists, and only if it carries the runner's pid (a
  record from a forked child is ignored). The runner writes a test's record
  after the test returned, so a test the program never let run has no record
  and counts as failed.
- ``sys.exit(0)`` / ``SystemExit`` / ``KeyboardInterrupt`` raised by the
  program, at import or inside a test, are caught as ``BaseException`` and
  recorded as that test failing; ``os._exit`` or a signal ends the run with
  the remaining tests missing, hence failed. Killing the parent hits the
  sandbox's pid-1 (ignored) or another uid (EPERM); either way no record
  appears.
- A "start" record written before the program is loaded tells a sandbox that
  never ran the runner (``sandbox_error``, not a wrong answer) from a program
  that died: the program cannot suppress a start record that precedes it.
- Limits of this argument: the program shares the runner's process, so a
  program written to attack this harness (digging the nonce out of the
  runner's frames or memory, or returning objects whose ``__eq__`` lies to an
  assert) can still forge a pass. ``cases`` and stdin/stdout tests resist
  that: the expected values never enter the sandbox and the comparison runs
  here on plain JSON / text.

Not covered: languages other than Python, and the worker pool / timeout
around this call (the verifier runtime owns that).
"""

from __future__ import annotations

import json
import math
import re
import secrets
import time
from typing import Any, Literal

import msgspec

from rlvr.protocol import Verdict
from rlvr.verify.sandbox.base import ExecutionResult, Sandbox, SandboxLimits


class IOCase(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    input: str
    output: str


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
    setup: str = ""  # run before the program: MBPP test_setup_code / test_imports
    language: Literal["python"] = "python"


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


_RUNNER = r'''
import copy, json, os, sys

def main():
    nonce = sys.stdin.readline().strip()
    sys.stdin = open(os.devnull)
    with open("tests.json") as f:
        spec = json.load(f)
    os.remove("tests.json")
    pid = os.getpid()
    chan = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the program's prints go to stderr, never to the channel

    def report(kind, i=-1, ok=False, info=""):
        chan.write(nonce + " " + json.dumps([pid, kind, i, ok, info[:20000]]) + "\n")
        chan.flush()

    def plain(x):
        return sorted(x, key=repr) if isinstance(x, (set, frozenset)) else repr(x)

    report("start")
    sys.modules["solution"] = type(sys)("solution")
    ns = sys.modules["solution"].__dict__
    try:
        exec(compile(spec["setup"], "setup.py", "exec"), ns)
        with open("solution.py") as f:
            exec(compile(f.read(), "solution.py", "exec"), ns)
        loaded = ""
    except BaseException as e:
        loaded = "program failed to load: %s: %s" % (type(e).__name__, e)
    entry = spec["entry_point"]
    if not loaded and not callable(ns.get(entry)):
        loaded = "entry point %r not defined" % entry
    for i, test in enumerate(spec["tests"]):
        if loaded:
            report("test", i, False, loaded)
            continue
        try:
            if spec["kind"] == "asserts":
                ns["candidate"] = ns[entry]
                exec(compile(test, "test_%d.py" % i, "exec"), ns)
                report("test", i, True)
            elif spec["kind"] == "check":
                exec(compile(test, "check.py", "exec"), ns)
                ns["check"](ns[entry])
                report("test", i, True)
            else:
                got = ns[entry](*copy.deepcopy(test["args"]), **copy.deepcopy(test["kwargs"]))
                report("test", i, True, json.dumps(got, default=plain))
        except BaseException as e:
            report("test", i, False, "%s: %s" % (type(e).__name__, e))
    report("done")

main()
'''


def score_code(response: str, params: CodeParams, sandbox: Sandbox, limits: SandboxLimits) -> Verdict:
    t0 = time.monotonic()
    program = extract_program(response)
    if not program.strip():
        return _verdict(0, _count(params), "parse_error", params, program, t0, "no program in the response")
    if isinstance(params.tests, list):
        passed, total, outcome, detail = _run_io(program, params, sandbox, limits)
    else:
        passed, total, outcome, detail = _run_calls(program, params.tests, params.setup, sandbox, limits)
    return _verdict(passed, total, outcome, params, program, t0, detail)


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
    passed, timed_out, first_fail = 0, False, ""
    for i, case in enumerate(cases):
        res = sandbox.run({"solution.py": params.setup + "\n" + program}, ["python3", "-I", "solution.py"], case.input, limits)
        if res.error:
            return passed, len(cases), "sandbox_error", res.error
        ok = res.exit_code == 0 and not res.timed_out and not res.output_truncated and _same_text(res.stdout, case.output)
        passed += ok
        timed_out = timed_out or res.timed_out
        if not ok:
            first_fail = first_fail or f"case {i}: {_why(res)}"
            if params.mode == "all_or_nothing":
                break
    outcome = "ok" if passed == len(cases) else "timeout" if timed_out else "wrong"
    return passed, len(cases), outcome, first_fail


def _run_calls(program: str, tests: CallTests, setup: str, sandbox: Sandbox, limits: SandboxLimits) -> tuple[int, int, str, str]:
    if tests.check is not None:
        kind, items = "check", [tests.check]
    elif tests.asserts is not None:
        kind, items = "asserts", list(tests.asserts)
    else:
        kind, items = "cases", [{"args": c.args, "kwargs": c.kwargs} for c in tests.cases or []]
    spec = {"kind": kind, "entry_point": tests.entry_point, "setup": setup, "tests": items}
    nonce = secrets.token_hex(16)
    files = {"runner.py": _RUNNER, "solution.py": program, "tests.json": json.dumps(spec)}
    res = sandbox.run(files, ["python3", "-I", "runner.py"], nonce + "\n", limits)
    total = len(items)
    if res.error:
        return 0, total, "sandbox_error", res.error
    records = _records(res.stdout, nonce)
    if records is None:
        if res.timed_out:
            return 0, total, "timeout", _why(res)
        return 0, total, "sandbox_error", f"the test runner never started: {_why(res)}"
    passed, first_fail = 0, ""
    for i in range(total):
        ok, info = records.get(i, (False, f"no result, the run ended first ({_why(res)})"))
        if ok and kind == "cases":
            ok = _same_value(json.loads(info), tests.cases[i].expected)  # type: ignore[index]
            info = "" if ok else f"got {info[:200]}"
        passed += ok
        if not ok and not first_fail:
            first_fail = f"test {i}: {info or _why(res)}"
    outcome = "ok" if passed == total else "timeout" if res.timed_out else "wrong"
    return passed, total, outcome, first_fail


def _records(stdout: str, nonce: str) -> dict[int, tuple[bool, str]] | None:
    """Test index -> (passed, info) from the runner's records; None when the
    runner never wrote its start record."""
    pid, out = None, {}
    for line in stdout.splitlines():
        if not line.startswith(nonce + " "):
            continue
        try:
            rpid, kind, i, ok, info = json.loads(line[len(nonce) + 1 :])
        except (ValueError, TypeError):
            continue
        if kind == "start" and pid is None:
            pid = rpid
        elif kind == "test" and rpid == pid and isinstance(i, int) and i not in out:
            out[i] = (ok is True, str(info))
    return None if pid is None else out


def _same_text(got: str, want: str) -> bool:
    def norm(s: str) -> list[str]:
        return [line.rstrip() for line in s.strip().splitlines()]

    return norm(got) == norm(want)


def _same_value(got: Any, want: Any) -> bool:
    """JSON-level equality; numbers within 1e-6 relative (bools are not numbers)."""
    if isinstance(want, bool) or isinstance(got, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        if isinstance(want, int) and isinstance(got, int):
            return got == want
        return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(got) == len(want) and all(_same_value(g, w) for g, w in zip(got, want))
    if isinstance(want, dict) and isinstance(got, dict):
        return got.keys() == want.keys() and all(_same_value(got[k], want[k]) for k in want)
    return type(got) is type(want) and got == want


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
