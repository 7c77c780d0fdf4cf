"""The trusted driver inside the sandbox: runs the tests, writes the verdict.

Copied into the sandbox as ``driver.py`` and run as ``python3 -I -S driver.py``
before any program code exists. In order, it:

1. reads all of stdin: a per-run HMAC key (hex, first line) and the test plan
   (JSON: setup code, entry point, tests). stdin is then at EOF, so nothing of
   it is left for anyone else to read;
2. keeps a private dup of stdout for its records and points fd 1 at stderr,
   so a ``print`` in test code cannot break a record;
3. makes itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``): no process of
   the sandbox's uid can ptrace it, ``process_vm_readv`` it, or open its
   ``/proc/<pid>/mem``, ``environ`` or ``fd/*``. It fails closed: a driver
   that cannot do this reports a fault and runs nothing;
4. keeps ``sys.path`` to the read-only standard library (``-I -S``; the work
   dir and ``/tmp`` dropped), so a module file the program writes is never
   imported here, whenever test code imports;
5. starts the candidate's process (``child.py``, ``code_child``) with stdin
   from ``/dev/null``, stdout and stderr into a pipe this driver drains and
   caps, and two pipes for calls and answers; nothing else is inherited;
6. per test writes one record: ``<hmac-sha256 hex> <json>``. A call test
   sends the arguments, decodes the answer into fresh plain objects
   (``code_wire``) and records the value's wire text (or its sha256 when
   long); the expected value is not here at all. A code test (an assert that
   is not ``f(literal) == literal``, or HumanEval ``check``) runs here, with
   asserts compiled at ``optimize=0``, against ``Remote`` callables that
   forward each call to the candidate and return plain values only; the
   test passes only if it ran to the end and no call faulted (a dead
   candidate, non-plain data, a protocol violation).

Not covered: what the tests are or how the records are judged (outside the
sandbox, ``rlvr.verify.code_tests``), and the wall clock (the sandbox's).
"""

import builtins
import ctypes
import hashlib
import hmac
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import threading

PR_SET_DUMPABLE, PR_GET_DUMPABLE = 4, 3
MAX_ANSWER = 16 << 20  # bytes of one answer line from the candidate
INLINE_VALUE = 64 << 10  # a longer value is recorded as its sha256
KEEP_OUTPUT = 2000  # bytes of the candidate's own prints kept for diagnostics
# Exceptions a test may catch from the candidate by type; anything else it
# raised (BaseException subclasses included) is a fault, which no test code
# can swallow. Not StopIteration: raised inside ``map(candidate, xs)`` it
# would end the test's loop early, as if every case had passed.
_MAPPED = {n: getattr(builtins, n) for n in (
    "ArithmeticError", "AssertionError", "AttributeError", "IndexError", "KeyError", "LookupError",
    "NotImplementedError", "OverflowError", "RecursionError", "RuntimeError", "TypeError",
    "ValueError", "ZeroDivisionError")}


class CandidateFault(BaseException):
    """The candidate died, broke the protocol or returned non-plain data."""


class Channel:
    """Records on a private dup of the sandbox's stdout, each with an HMAC."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._fd = os.dup(1)
        os.dup2(2, 1)

    def send(self, *payload) -> None:
        body = json.dumps(list(payload), separators=(",", ":")).encode()
        mac = hmac.new(self._key, body, hashlib.sha256).hexdigest().encode()
        line = mac + b" " + body + b"\n"
        while line:
            line = line[os.write(self._fd, line):]


def harden() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    if libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError("the driver is still dumpable")


def load_wire():
    spec = importlib.util.spec_from_file_location("rlvr_wire", os.path.abspath("wire.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Candidate:
    """The candidate's process, seen only through its pipes."""

    def __init__(self, wire, plan: dict) -> None:
        self.wire = wire
        self.dead = ""  # why the process cannot answer any more
        self.faults, self.last_fault = 0, ""
        self.output = bytearray()
        self.output_cap = int(plan.get("output_cap", 1 << 16))
        cmd_r, cmd_w = os.pipe()
        ans_r, ans_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable or "python3", "-I", "-u", "child.py", str(cmd_r), str(ans_w)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            pass_fds=(cmd_r, ans_w), close_fds=True, env=dict(os.environ),
        )
        os.close(cmd_r)
        os.close(ans_w)
        self._cmd = os.fdopen(cmd_w, "wb")
        self._ans = os.fdopen(ans_r, "rb")
        threading.Thread(target=self._drain, daemon=True).start()
        init = {"program": "solution.py", "setup": plan["setup"], "entry": plan["entry"], "class_first": plan["class_first"]}
        try:
            msg = self._exchange(init)
        except CandidateFault as e:
            msg = {"error": str(e)}
        if msg.get("loaded") is True and type(msg.get("names")) is list:
            self.names = {n for n in msg["names"][:10000] if type(n) is str and n.isidentifier()}
            modules = msg.get("modules") if type(msg.get("modules")) is list else []
            self.modules = {n for n in modules[:1000] if type(n) is str and n.isidentifier()}
            self.load_error = ""
        else:
            self.names, self.modules = set(), set()
            self.load_error = "program failed to load: " + str(msg.get("error", "no answer"))[:500]

    def _drain(self) -> None:
        """Keep the start of the candidate's prints; past ``output_cap``
        bytes end it, as the sandbox would a program that floods stdout."""
        total = 0
        for chunk in iter(lambda: self.proc.stdout.read1(65536), b""):
            room = KEEP_OUTPUT - len(self.output)
            if room > 0:
                self.output += chunk[:room]
            total += len(chunk)
            if total > self.output_cap and not self.dead:
                self.dead = f"output limit exceeded ({self.output_cap} bytes)"
                self.close()

    def _fault(self, why: str, dead: bool = False):
        self.faults += 1
        self.last_fault = why
        if dead:
            self.dead = self.dead or why
        raise CandidateFault(why)

    def _exchange(self, msg: dict) -> dict:
        if self.dead:
            self._fault(self.dead, dead=True)
        try:
            self._cmd.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
            self._cmd.flush()
            line = self._ans.readline(MAX_ANSWER + 1)
        except OSError as e:
            self._fault(self.dead or f"the candidate's process is gone ({type(e).__name__})", dead=True)
        if not line.endswith(b"\n"):
            self._fault(self.dead or ("answer too long" if len(line) > MAX_ANSWER else "the candidate's process ended"), dead=True)
        try:
            answer = json.loads(line)
        except (ValueError, RecursionError):
            answer = None
        if type(answer) is not dict:
            self._fault("the candidate broke the call protocol", dead=True)
        return answer

    def call(self, fn: str, args: tuple, kwargs: dict, truth: bool = False):
        """``fn(*args, **kwargs)`` in the candidate (or its truth value); fresh
        plain objects back."""
        try:
            msg = {"fn": fn, "args": self.wire.to_data(list(args)), "kwargs": self.wire.to_data(dict(kwargs)), "truth": truth}
        except ValueError as e:  # the test passed something that cannot cross
            self._fault(f"argument is not plain data: {e}")
        answer = self._exchange(msg)
        if answer.get("ok") is True:
            try:
                return self.wire.from_data(answer.get("value"))
            except (ValueError, RecursionError) as e:
                self._fault(f"{fn} returned {e}")
        etype, text = str(answer.get("type"))[:80], str(answer.get("error"))[:500]
        if etype in _MAPPED:
            raise _MAPPED[etype](text)
        self._fault(f"{fn} returned {text}" if etype == "NotPlainError" else f"{fn} raised {etype}: {text}")

    def close(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass


class Remote:
    """A program function as test code sees it: plain values in and out."""

    __slots__ = ("_cand", "_name")

    def __init__(self, cand: Candidate, name: str) -> None:
        self._cand, self._name = cand, name

    def __call__(self, *args, **kwargs):
        return self._cand.call(self._name, args, kwargs)

    @property
    def __name__(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"<candidate {self._name}>"


def run_code_test(test: dict, base: dict, cand: Candidate, entry: str):
    """(passed, info) of one assert or check test, run here. Any fault during
    it fails it, even one the test code caught (a bare ``except:``)."""
    faults = cand.faults
    try:
        source = test["code"]
        ns = dict(base)
        names = {n for n in test.get("names", []) if type(n) is str}  # the names it uses, found outside
        for name in names - base.keys() - set(dir(builtins)):
            if name in cand.names:
                ns[name] = Remote(cand, name)
            elif name in cand.modules:  # a module the program imported (``sys``): the driver's own copy
                try:
                    ns[name] = importlib.import_module(name)
                except ImportError:
                    pass
        ns[entry] = ns["candidate"] = Remote(cand, entry)
        exec(compile(source, "<test>", "exec", dont_inherit=True, optimize=0), ns)
        if test.get("check"):
            ns["check"](ns["candidate"])
    except BaseException as e:  # noqa: BLE001 - a failed test, whatever the test code raised
        if cand.faults != faults:
            return False, cand.last_fault
        return False, f"{type(e).__name__}: {str(e)[:500]}"
    if cand.faults != faults:
        return False, cand.last_fault
    return True, ""


def run_call_test(test: dict, cand: Candidate, budget: list):
    """(passed, info): info is the value's wire text or sha256, or the error."""
    try:
        args = cand.wire.from_data(test["args"])
        kwargs = cand.wire.from_data(test["kwargs"])
        value = cand.call(test["fn"], args, kwargs, truth=bool(test.get("truth")))
        text = cand.wire.encode(value, json_only=bool(test.get("json")))
    except BaseException as e:  # noqa: BLE001 - a fault, or the candidate's exception mapped above
        return False, str(e) if isinstance(e, CandidateFault) else f"{type(e).__name__}: {str(e)[:500]}"
    if len(text) <= min(INLINE_VALUE, budget[0]):
        budget[0] -= len(text)
        return True, {"value": text}
    return True, {"digest": cand.wire.digest(text), "bytes": len(text)}


def main() -> None:
    key = bytes.fromhex(sys.stdin.buffer.readline().decode().strip())
    plan = json.loads(sys.stdin.buffer.read())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    chan = Channel(key)
    try:
        harden()
    except OSError as e:
        chan.send("fault", -1, False, f"cannot make the test driver non-dumpable: {e}")
        return
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p and os.path.isabs(p) and not p.startswith((cwd, "/tmp"))]
    wire = load_wire()
    chan.send("start", -1, True, "")
    base = {"__builtins__": builtins, "__name__": "__test__"}
    cand = None
    try:
        try:
            exec(compile(plan["setup"], "<setup>", "exec", dont_inherit=True, optimize=0), base)
            setup_error = ""
        except Exception as e:  # noqa: BLE001 - the task's setup code is broken: every test fails
            setup_error = f"test setup failed: {type(e).__name__}: {e}"
        cand = Candidate(wire, plan)
        budget = [int(plan.get("inline_budget", 1 << 20))]
        for i, test in enumerate(plan["tests"]):
            if setup_error or cand.load_error:
                chan.send("test", i, False, setup_error or cand.load_error)
            elif "code" in test:
                chan.send("test", i, *run_code_test(test, base, cand, plan["entry"]))
            else:
                chan.send("test", i, *run_call_test(test, cand, budget))
    finally:
        if cand is not None:
            tail = bytes(cand.output).decode("utf-8", "replace")
            cand.close()
            chan.send("done", -1, True, tail)
    # Every record is sent and signed: leave now, so test code's atexit hooks or
    # lingering threads cannot write after "done" (this is the sandboxed driver, not an actor).
    os._exit(0)


if __name__ == "__main__":
    main()
