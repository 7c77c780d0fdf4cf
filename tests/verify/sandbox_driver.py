"""A stand-in verifier worker for the hostile sandbox tests (run as a script,
never imported by pytest: its name does not start with ``test_``).

``python sandbox_driver.py`` reads one JSON request on stdin: the backend
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
import sys

import msgspec

from rlvr.verify.sandbox import SandboxLimits, SandboxUnavailableError, make_sandbox
from rlvr.verify.sandbox import local  # noqa: F401 - imported before the uid drop, like every module it needs


def main() -> None:
    req = json.loads(sys.stdin.read())
    if req["backend"] == "docker":
        import docker  # noqa: F401 - imported while its files are readable

        from rlvr.verify.sandbox import docker as _  # noqa: F401

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
