"""The candidate's side inside the sandbox: load the program, answer calls.

Copied into the sandbox as ``child.py`` next to ``wire.py`` (``code_wire``)
and run by the sandbox's interpreter in one of two ways:

- ``python3 -I child.py FD_IN FD_OUT``, started by the driver
  (``code_driver``) for call-based tests. It reads one JSON line (program
  file, setup code, entry point, whether a ``class Solution`` method comes
  first), loads the program as module ``solution`` after ``PRELUDE``, and
  answers ``{"loaded": ..., "names": [...], "modules": [...]}`` (its
  callables, and the modules it imported under their own names). Then, per
  JSON call line ``{"fn", "args", "kwargs", "truth"}`` (wire form), it calls
  the function on fresh argument objects and answers ``{"ok": true, "value":
  <wire>}`` (with ``truth``, the value's truth value) or ``{"ok": false,
  "type": ..., "error": ...}``.
- ``python3 -I child.py --main``: stdin/stdout tests; runs ``solution.py``
  as ``__main__`` after ``PRELUDE`` (and the setup code in ``setup.py``).

Nothing here is trusted once the program is loaded: the program owns this
process and may rewrite any of it. What keeps the verdict honest lives in
the driver's process and outside the sandbox (see ``rlvr.verify.code``);
this file only makes honest programs work: the LiveCodeBench-style names
(``PRELUDE``), ``Solution`` methods, and return values turned into plain
data (``code_wire``, lenient).
"""

import json
import os
import sys
import types

# The names LeetCode / LiveCodeBench programs use without importing them:
# typing's List, Optional, Dict, ... and the usual algorithm modules with
# their common names. math's float ``pow`` must not replace the builtin
# (``pow(a, b, mod)``), so the builtin is bound again after ``math``.
PRELUDE = """
from typing import *
from collections import *
from heapq import *
from bisect import *
from itertools import *
from functools import *
from math import *
from builtins import pow
import bisect, collections, copy, functools, heapq, itertools, math, operator, random, re, string, sys
sys.setrecursionlimit(100000)
"""


def _wire():
    """``wire.py`` loaded as a module (``-I`` keeps this dir off sys.path)."""
    mod = types.ModuleType("rlvr_wire")
    with open("wire.py", encoding="utf-8") as f:
        exec(compile(f.read(), "wire.py", "exec"), mod.__dict__)
    return mod


def _text(e: BaseException) -> str:
    try:
        return str(e)[:500]
    except BaseException:  # noqa: BLE001 - a program's __str__ may raise anything
        return "<unprintable>"


def _resolve(ns: dict, name: str, entry: str, class_first: bool):
    """The callable for ``name``: the entry point may be a method of a fresh
    ``Solution()`` (LeetCode); any other name is a top-level callable."""
    top = ns.get(name)
    cls = ns.get("Solution") if name == entry else None
    method_ok = isinstance(cls, type) and callable(getattr(cls, name, None))
    if method_ok and (class_first or not callable(top)):
        return getattr(cls(), name)
    if callable(top):
        return top
    raise NameError(f"entry point {name!r} is not defined" if name == entry else f"name {name!r} is not defined")


def _load(init: dict) -> dict:
    mod = types.ModuleType("solution")
    sys.modules["solution"] = mod
    ns = mod.__dict__
    exec(PRELUDE, ns)
    exec(compile(init.get("setup", ""), "setup.py", "exec"), ns)
    with open(init["program"], encoding="utf-8") as f:
        exec(compile(f.read(), "solution.py", "exec"), ns)
    return ns


def serve(fd_in: int, fd_out: int) -> None:
    wire = _wire()
    cmd = os.fdopen(fd_in, "rb")
    out = os.fdopen(fd_out, "wb")

    def reply(msg: dict) -> None:
        out.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        out.flush()

    init = json.loads(cmd.readline())
    entry, class_first = init["entry"], bool(init.get("class_first"))
    try:
        ns = _load(init)
        _resolve(ns, entry, entry, class_first)
    except BaseException as e:  # noqa: BLE001 - sys.exit at import is a failed load, not our exit
        reply({"loaded": False, "error": f"{type(e).__name__}: {_text(e)}"})
        return
    names = [k for k, v in list(ns.items()) if k.isidentifier() and callable(v)]
    modules = [k for k, v in list(ns.items()) if isinstance(v, types.ModuleType) and v.__name__ == k]
    reply({"loaded": True, "names": names[:10000], "modules": modules[:1000]})
    for line in cmd:
        try:
            msg = json.loads(line)
            fn = _resolve(ns, msg["fn"], entry, class_first)
            args = wire.from_data(msg["args"])
            kwargs = wire.from_data(msg["kwargs"])
            value = fn(*args, **kwargs)
            if msg.get("truth"):  # ``assert f(x)``: only the truth value is asked for
                value = bool(value)
            reply({"ok": True, "value": wire.to_data(value, lenient=True)})
        except BaseException as e:  # noqa: BLE001 - SystemExit, KeyboardInterrupt... are a failed call
            reply({"ok": False, "type": type(e).__name__, "error": _text(e)})


def run_main() -> None:
    sys.argv[:] = ["solution.py"]
    ns = {"__name__": "__main__", "__builtins__": __builtins__, "__file__": "solution.py"}
    exec(PRELUDE, ns)
    for path in ("setup.py", "solution.py"):
        with open(path, encoding="utf-8") as f:
            source = f.read()
        exec(compile(source, path, "exec"), ns)


if __name__ == "__main__":
    if sys.argv[1:] == ["--main"]:
        run_main()
    else:
        serve(int(sys.argv[1]), int(sys.argv[2]))
