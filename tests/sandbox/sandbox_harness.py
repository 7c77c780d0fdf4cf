"""The harness of the hostile sandbox tests, both sides of it.

Test side (imported by ``test_sandbox_hostile.py`` and
``test_sandbox_regressions.py``): ``attack(target, code, *args)`` runs one
program through the driver below and returns its report; ``sandbox_user()``
creates the unprivileged user of the non-root half (CI runs as root);
``alive_with(token)`` finds host processes by a token in their command line.

Driver side (``python sandbox_harness.py``, a stand-in pool worker) reads one JSON request on stdin: the backend
(``bwrap``, ``none`` or ``docker``), the user to become, the program and its
limits. It is started with secrets in its environment (as a worker that
copied the actor's environment would hold them), imports everything it
needs, then, for a non-root run, drops to the given uid/gid (keeping only the
listed groups) and marks itself dumpable again, as a process started by that
user would be, so that ``/proc/<its pid>/environ`` is as readable to that uid
as a real non-root worker's. Then it builds the sandbox, runs the program
once, and prints one JSON line: the result, its pid, and whether it is still
alive (it prints nothing if the program managed to kill it).
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec

from rlvr.sandbox import SandboxLimits, SandboxUnavailableError, make_sandbox
from rlvr.sandbox import local  # noqa: F401 - imported before the uid drop, like every module it needs

SECRET = "rlvr-hostile-secret-7f3a9c"
USER = "rlvr-sbx-test"
TMP_MB = WORK_MB = 32
LIMITS = {"wall_s": 6.0, "cpu_s": 6, "memory_mb": 256, "processes": 16, "open_files": 64,
          "file_size_mb": 16, "output_bytes": 16384}


# ------------------------------------------------------------------ test side


def sandbox_user() -> dict:
    """The unprivileged user of the non-root half (created if missing)."""
    import pytest

    try:
        pw = pwd.getpwnam(USER)
    except KeyError:
        if os.geteuid() != 0 or shutil.which("useradd") is None:
            pytest.skip(f"user {USER} is missing and cannot be created here (not root or no useradd)")
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
        pw = pwd.getpwnam(USER)
    groups = []
    sock = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock").removeprefix("unix://")
    if os.path.exists(sock) and os.stat(sock).st_gid != 0:
        groups.append(os.stat(sock).st_gid)  # the docker group, the way a non-root verifier reaches the engine
    return {"uid": pw.pw_uid, "gid": pw.pw_gid, "groups": groups}


def target_for(backend: str, who: str) -> dict:
    """What ``attack`` needs to run as ``who`` ("root" or "nonroot")."""
    import pytest

    if os.geteuid() != 0 and who == "root":
        pytest.skip("the root half needs a root test run (CI runs as root)")
    return {"backend": backend, "user": sandbox_user() if who == "nonroot" and os.geteuid() == 0 else None}


def attack(target: dict, code: str, *args: str, limits: dict | None = None) -> dict:
    """Run ``code`` once in the target's sandbox through the driver; returns
    the driver's report (``result`` = the ExecutionResult as a dict). An
    argument ``"{worker_pid}"`` becomes the driver's own (host) pid."""
    import pytest

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NATS_PASSWORD": SECRET,
           "AWS_SECRET_ACCESS_KEY": SECRET, "NATS_URL": f"nats://verify:{SECRET}@127.0.0.1:4222",
           **{k: v for k, v in os.environ.items() if k.startswith("DOCKER_")}}
    req = {**target, "code": code, "args": list(args), "limits": limits or LIMITS, "tmp_mb": TMP_MB,
           "work_mb": WORK_MB, "image": os.environ.get("RLVR_SANDBOX_IMAGE", "rlvr-sandbox:local")}
    proc = subprocess.run([sys.executable, __file__], input=json.dumps(req), capture_output=True, text=True,
                          env=env, cwd="/", timeout=120)
    lines = proc.stdout.strip().splitlines()
    assert lines, f"the worker died (exit {proc.returncode}): {proc.stderr[-2000:]}"
    report = json.loads(lines[-1])
    if "unavailable" in report:
        pytest.skip(f"level {target['backend']} unavailable here: {report['unavailable']}")
    return report


def alive_with(token: str) -> list[int]:
    """Host pids whose command line holds ``token`` (zombies have none)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if token.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


# ---------------------------------------------------------------- driver side


def main() -> None:
    req = json.loads(sys.stdin.read())
    if req["backend"] == "docker":
        try:
            import docker  # noqa: F401 - imported while its files are readable
        except ImportError as e:
            print(json.dumps({"unavailable": f"the docker SDK is not installed: {e}"}))
            return
        from rlvr.sandbox import docker as _  # noqa: F401

    user = req.get("user")
    if user is not None:
        os.setgroups(user["groups"])
        os.setgid(user["gid"])
        os.setuid(user["uid"])
        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: as if started by that user
    try:
        if req["backend"] == "docker":
            box = make_sandbox("docker", image=req["image"], tmp_mb=req["tmp_mb"], work_mb=req["work_mb"])
        else:
            box = make_sandbox("local", isolation=req["backend"], allow_unsandboxed=True,
                               tmp_mb=req["tmp_mb"], work_mb=req["work_mb"])
    except SandboxUnavailableError as e:
        print(json.dumps({"unavailable": str(e)}))
        return
    limits = msgspec.convert(req["limits"], SandboxLimits)
    # "{worker_pid}" in an argument: this process's host pid, a target for the attack.
    argv = ["python3", "main.py", *(a.replace("{worker_pid}", str(os.getpid())) for a in req["args"])]
    res = box.run({"main.py": req["code"]}, argv, req.get("stdin", ""), limits)
    box.close()
    print(json.dumps({"result": msgspec.to_builtins(res), "worker_pid": os.getpid(), "uid": os.getuid()}))


if __name__ == "__main__":
    main()
