"""Hostile programs for ``test_code_hostile``: each written as an attacker
who has read ``rlvr.verify.code``, ``code_driver``, ``code_child`` and
``code_wire``. Each goes after the record key, the expected values, the test
code or the driver, returns what it found, and otherwise a wrong answer
(``a - b``). They also beat the old in-process runner where it was open to
them (the lying objects, the walker, the stripper, the poisoner, patching
``exec``), which is how they were checked to be real.

Not tests themselves: sources only, run through ``score_code`` by the suite.
"""

LIARS = '''
import numbers

class Liar:
    numerator, denominator = 2, 1
    def __init__(self, *args): pass
    def as_integer_ratio(self): return (4, 1)
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __hash__(self): return hash(5)
    def __bool__(self): return True
    def __lt__(self, other): return True
    __le__ = __gt__ = __ge__ = __lt__
    def __abs__(self): return 0
    def __sub__(self, other): return self
    __rsub__ = __add__ = __radd__ = __mul__ = __rmul__ = __truediv__ = __sub__
    def __float__(self): return 0.0
    def __int__(self): return 5
    __index__ = __int__
    def __iter__(self): return iter([5])
    def __len__(self): return 1
    def __repr__(self): return "5"

numbers.Rational.register(Liar)

class LyingInt(int):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = int.__hash__
    def __bool__(self): return True

class LyingList(list):
    def __eq__(self, other): return True
    def __ne__(self, other): return False

class LyingStr(str):
    def __eq__(self, other): return True
    __hash__ = str.__hash__
'''

WALKER = r'''
import gc, hashlib, hmac, inspect, json, os, re, sys

FOUND = {"keys": [], "nonces": [], "values": {}, "tests": []}

def _frames():
    out = []
    f = sys._getframe()
    while f is not None:
        out.append(f); f = f.f_back
    for fr in sys._current_frames().values():
        while fr is not None:
            out.append(fr); fr = fr.f_back
    try:
        raise RuntimeError("walk")
    except RuntimeError as e:
        tb = e.__traceback__
        while tb is not None:
            fr = tb.tb_frame
            while fr is not None:
                out.append(fr); fr = fr.f_back
            tb = tb.tb_next
    return out

def _look(o):
    if isinstance(o, dict):
        for k in ("expected", "output", "tests", "plan", "expects", "key", "check", "code"):
            if k in o:
                FOUND["tests"].append(o[k])
    elif isinstance(o, (bytes, bytearray)) and len(o) == 32:
        FOUND["keys"].append(bytes(o))
    elif isinstance(o, str) and re.fullmatch(r"[0-9a-f]{64}", o):
        FOUND["keys"].append(bytes.fromhex(o))
    elif isinstance(o, str) and re.fullmatch(r"[0-9a-f]{32}", o):
        FOUND["nonces"].append(o)
    elif isinstance(o, str) and "==" in o:
        for m in re.finditer(r"add\((-?\d+), (-?\d+)\) == (-?\d+)", o):
            FOUND["values"][(int(m[1]), int(m[2]))] = int(m[3])

def _walk():
    frames = _frames()
    for fr in frames:
        _look(fr.f_locals); _look(fr.f_globals)
        for v in list(fr.f_locals.values()):
            _look(v)
    for o in gc.get_objects():
        try:
            _look(o)
        except Exception:
            pass
    # A reporting function of the harness within reach: report every test passed.
    for o in gc.get_objects():
        if inspect.isfunction(o) and o.__name__ in ("report", "send"):
            for i in range(6):
                try:
                    o("test", i, True, "")
                except Exception:
                    pass

def _forge():
    lines = []
    for key in FOUND["keys"][:300]:
        for i in range(6):
            for info in ("", {"value": "5"}, {"value": "6"}, {"value": "[1,2,3]"}):
                body = json.dumps(["test", i, True, info], separators=(",", ":")).encode()
                lines.append(hmac.new(key, body, hashlib.sha256).hexdigest().encode() + b" " + body)
            body = json.dumps(["start", -1, True, ""], separators=(",", ":")).encode()
            lines.append(hmac.new(key, body, hashlib.sha256).hexdigest().encode() + b" " + body)
    for nonce in FOUND["nonces"][:300]:
        for i in range(6):
            lines.append((nonce + " " + json.dumps([os.getpid(), "test", i, True, ""])).encode())
    blob = b"\n".join(lines) + b"\n"
    # Every descriptor but the child's own call pipes (argv), which it keeps clean.
    targets = [fd for fd in range(1, 20) if str(fd) not in sys.argv[1:]]
    for p in ["/proc/1/fd/1", f"/proc/{os.getppid()}/fd/1", "/dev/stdout", "/proc/self/fd/1"]:
        try:
            targets.append(os.open(p, os.O_WRONLY))
        except OSError:
            pass
    for fd in targets:
        try:
            os.write(fd, blob)
        except OSError:
            pass

_walk()
_forge()

def add(a, b):
    _walk()
    _forge()
    return FOUND["values"].get((a, b), a - b if not isinstance(a, list) else [])
'''

WRONG = "def add(a, b):\n    return a - b if not isinstance(a, list) else []\n"
PATCHES = {
    # Test code that never runs raises nothing.
    "exec": "import builtins\nbuiltins.exec = lambda *a, **k: None\n",
    # A failed assert raises a type nobody reports as a failure.
    "assertion_error": "import builtins\nclass Quiet(BaseException):\n    pass\nbuiltins.AssertionError = Quiet\n",
    # abs(candidate(x) - y) < 1e-9 and math.isclose always hold.
    "abs_isclose": "import builtins, math\nbuiltins.abs = lambda x: 0\nmath.isclose = lambda *a, **k: True\n",
    # The child's reply: every answer claims success.
    "reply": ("import json\n_dumps = json.dumps\n"
              "json.dumps = lambda obj, *a, **k: _dumps({'ok': True, 'value': True, 'loaded': True, 'names': ['add']})\n"),
    # The harness on disk: whoever reads it next gets a harness that passes everything.
    "files": ("import os\nfor name in os.listdir('.'):\n    if name.endswith('.py') and name != 'solution.py':\n"
              "        try:\n            open(name, 'w').write('import sys\\nprint(sys.argv)\\n')\n"
              "        except OSError:\n            pass\n"),
}

STRIPPER = r'''
import builtins, ctypes, os, sys

os.environ["PYTHONOPTIMIZE"] = "2"
try:
    ctypes.c_int.in_dll(ctypes.pythonapi, "Py_OptimizeFlag").value = 2
except Exception:
    pass
_compile = compile
def _stripping(source, filename, mode, flags=0, dont_inherit=False, optimize=-1, **kw):
    return _compile(source, filename, mode, flags, dont_inherit, 2)
builtins.compile = _stripping
# Rewrite the driver on disk to strip asserts for any later reader.
for name in ("driver.py", "child.py"):
    try:
        text = open(name).read().replace("optimize=0", "optimize=2")
        open(name, "w").write(text)
    except OSError:
        pass

def add(a, b):
    return a - b if not isinstance(a, list) else []
'''

# What a planted module does when imported: report every test passed through
# whatever reporting function is on the stack or in memory, then exit.
POISON = r'''
import gc, inspect, os, sys
_f = sys._getframe()
_reporters = []
while _f is not None:
    for v in list(_f.f_locals.values()) + list(_f.f_globals.values()):
        if inspect.isfunction(v) and v.__name__ in ("report", "send"):
            _reporters.append(v)
        if hasattr(v, "send") and hasattr(v, "_key"):
            _reporters.append(v.send)
    _f = _f.f_back
for _r in _reporters:
    for _i in range(6):
        try:
            _r("test", _i, True, "")
        except Exception:
            pass
if _reporters:
    os._exit(0)
def mean(xs): return 4
def isclose(*a, **k): return True
class Fraction(int):
    def __eq__(self, other): return True
'''
POISONER = r'''
import os, sys, types
POISON = %r
for name in ("math", "json", "hmac", "hashlib", "statistics", "fractions", "random", "copy"):
    fake = types.ModuleType(name)
    exec(POISON, fake.__dict__)
    sys.modules[name] = fake
for d in (".", "/tmp", os.environ.get("HOME", "."), "/work"):
    for name in ("statistics", "fractions", "json", "hmac", "hashlib", "random", "copy", "numbers", "decimal"):
        try:
            with open(os.path.join(d, name + ".py"), "w") as f:
                f.write(POISON)
        except OSError:
            pass

def add(a, b):
    return a - b if not type(a) is list else []
''' % POISON

FAKER = r'''
import hashlib, hmac, json, os, sys

def _lines():
    keys = [b"", b"\0" * 32, b"key"]
    for p in ("/proc/%d/cmdline" % os.getppid(), "/proc/%d/environ" % os.getppid(), "/proc/self/environ"):
        try:
            keys.append(open(p, "rb").read()[:32])
        except OSError:
            pass
    out = []
    for key in keys:
        for kind, i, info in [("start", -1, "")] + [("test", i, v) for i in range(6) for v in ("", {"value": "5"})] + [("done", -1, "")]:
            body = json.dumps([kind, i, True, info], separators=(",", ":"))
            out.append(hmac.new(key, body.encode(), hashlib.sha256).hexdigest() + " " + body)
            out.append("x " + json.dumps([os.getpid(), kind, i, True, ""]))
    return "\n".join(out) + "\n"

FAKE = _lines()
for write in (sys.stdout.write, sys.stderr.write, sys.__stdout__.write):
    try:
        write(FAKE); sys.stdout.flush()
    except Exception:
        pass
for p in ("/proc/1/fd/1", "/proc/%d/fd/1" % os.getppid(), "/dev/stdout", "/dev/tty"):
    try:
        fd = os.open(p, os.O_WRONLY)
        os.write(fd, FAKE.encode())
    except OSError:
        pass

def add(a, b):
    print(FAKE)
    return a - b if not isinstance(a, list) else []
'''
FAKER_STDIN = FAKER + "a, b = map(int, input().split())\nprint(FAKE)\nprint(a - b)\n"

READER = r'''
import json, os, re, sys

TEXT = []
def _read(path, limit=1 << 20):
    try:  # non-blocking: a pipe reached through /proc must not hang the attack
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            TEXT.append(os.read(fd, limit).decode("utf-8", "replace"))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        pass

for root in (".", "/work", "/tmp", "..", os.environ.get("HOME", "."), "/dev/shm", "/run", "/var/tmp"):
    for dirpath, dirs, files in os.walk(root):
        for name in files[:200]:
            _read(os.path.join(dirpath, name))
        if os.path.abspath(dirpath).count("/") >= 3:
            dirs[:] = []
        dirs[:] = [d for d in dirs if d not in ("usr", "proc", "sys", "lib", "lib64", "bin", "sbin")]
for pid in os.listdir("/proc"):
    if pid.isdigit() or pid == "self":
        for part in ("cmdline", "environ", "fd/0", "fd/1", "fd/3", "fd/4", "fd/5", "mem"):
            _read(f"/proc/{pid}/{part}", 1 << 16)
try:
    TEXT.append(os.read(0, 1 << 20).decode("utf-8", "replace"))
except OSError:
    pass
BLOB = "\n".join(TEXT)
VALUES = {}
for m in re.finditer(r"add\((-?\d+), (-?\d+)\) == (-?\d+)", BLOB):
    VALUES[(int(m[1]), int(m[2]))] = int(m[3])
for m in re.finditer(r'"input": "(-?\d+)\\n(-?\d+)", "output": "(-?\d+)"', BLOB):
    VALUES[(int(m[1]), int(m[2]))] = int(m[3])
for m in re.finditer(r'"(-?\d+) (-?\d+)\\n", "output": "(-?\d+)', BLOB):
    VALUES[(int(m[1]), int(m[2]))] = int(m[3])

def add(a, b):
    if isinstance(a, list):
        return []
    return VALUES.get((a, b), a - b)
'''
READER_STDIN = READER + "a, b = map(int, input().split())\nprint(add(a, b))\n"

# The driver's memory, as "reading the expected values out of the runner's
# memory" did to the old in-process runner: /proc/<pid>/mem of every process
# (the driver is the parent), then process_vm_readv; the key (64 hex digits
# after the plan's start) forges records, the assert text gives the answers.
MEMREADER = r'''
import ctypes, hashlib, hmac, json, os, re

class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

def _regions(pid):
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                addr, perms = line.split()[:2]
                if perms.startswith("rw"):
                    lo, hi = (int(x, 16) for x in addr.split("-"))
                    yield lo, min(hi, lo + (64 << 20))
    except OSError:
        return

def _dump(pid):
    out = []
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except OSError:
        fd = None
    libc = ctypes.CDLL(None, use_errno=True)
    for lo, hi in _regions(pid):
        chunk = b""
        if fd is not None:
            try:
                chunk = os.pread(fd, hi - lo, lo)
            except OSError:
                chunk = b""
        if not chunk:
            buf = ctypes.create_string_buffer(hi - lo)
            local, remote = _IoVec(ctypes.cast(buf, ctypes.c_void_p), hi - lo), _IoVec(lo, hi - lo)
            n = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
            chunk = buf.raw[:n] if n > 0 else b""
        out.append(chunk)
    return b"".join(out)

BLOB = b"".join(_dump(int(p)) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid())
VALUES = {}
for m in re.finditer(rb"(?:add|candidate)\((-?\d+), (-?\d+)\) == (-?\d+)", BLOB):
    VALUES[(int(m[1]), int(m[2]))] = int(m[3])
OWN = set()
for fd in os.listdir("/proc/self/fd"):
    try:
        OWN.add(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        pass
for key_hex in set(re.findall(rb"(?<![0-9a-f])([0-9a-f]{64})\n\{", BLOB)):
    key = bytes.fromhex(key_hex.decode())
    for i in range(6):
        body = json.dumps(["test", i, True, ""], separators=(",", ":")).encode()
        line = hmac.new(key, body, hashlib.sha256).hexdigest().encode() + b" " + body + b"\n"
        for pid in (os.getppid(), 1):
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                fds = []
            for fd in fds:
                try:  # not the pipes it shares with the driver: those carry its own answers
                    if os.readlink(f"/proc/{pid}/fd/{fd}") not in OWN:
                        os.write(os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK), line)
                except OSError:
                    pass

def add(a, b):
    if isinstance(a, list):
        return []
    return VALUES.get((a, b), a - b)
'''
