"""Regressions of issue 13, confirmed item 5 ("the local sandbox is weak when
the verifier is not root"). Each test is one finding of the issue's probes
and failed on the sandbox before the fix; the full attack matrix is in
``test_sandbox_hostile.py``.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

import msgspec
import pytest
import structlog
from sandbox_harness import LIMITS, SECRET, TMP_MB, WORK_MB, alive_with, attack, target_for

from rlvr.verify.actor import VerifyActor
from rlvr.sandbox.config import SandboxConfig
from rlvr.verify.config import VerifyConfig
from rlvr.sandbox import SandboxUnavailableError, make_sandbox
from rlvr.sandbox.levels import choose_level
from rlvr.sandbox.local import bwrap_args

FORKS = """
import os, time
n = 0
for _ in range(100):
    try:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
    except OSError:
        break
    n += 1
print(n)
"""


def test_a_non_root_verifier_enforces_the_fork_limit():
    # Was: RLIMIT_NPROC only for root; bwrap let 100 forks through a limit of 32.
    r = attack(target_for("bwrap", "nonroot"), FORKS, limits={**LIMITS, "processes": 32})["result"]
    assert r["error"] == "" and int(r["stdout"]) <= 32


FILL = """
import os, sys
total = 0
for i in range(int(sys.argv[2])):
    try:
        with open(os.path.join(sys.argv[1], f"f{i // 8}"), "ab") as f:
            f.write(b"x" * (1 << 20))
        total += 1
    except OSError:
        break
print(total)
"""


@pytest.mark.parametrize("where,cap", [("/tmp", TMP_MB), (".", WORK_MB)])
def test_a_non_root_verifier_caps_tmp_and_the_work_dir(where, cap):
    # Was: /tmp an unbounded tmpfs and no cap on the work dir (320 MB written past memory_mb=64).
    r = attack(target_for("bwrap", "nonroot"), FILL, where, str(cap * 4), limits={**LIMITS, "memory_mb": 64})["result"]
    assert r["error"] == "" and int(r["stdout"]) <= cap


SURVIVOR = """
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1]])
    os._exit(0)
"""


@pytest.mark.parametrize("level", ["bwrap", "none"])
def test_a_setsid_grandchild_does_not_outlive_the_run(level):
    # Was: a setsid grandchild outlived the run (non-root verifier).
    token = f"rlvr-regression-survivor-{level}"
    attack(target_for(level, "nonroot"), SURVIVOR, token)
    assert alive_with(token) == []


def test_auto_never_falls_back_to_none(monkeypatch, tmp_path):
    # Was: auto silently ran at level none when bwrap and setpriv were missing.
    prlimit = shutil.which("prlimit")
    if prlimit:
        (tmp_path / "prlimit").symlink_to(prlimit)  # what the old level none needed
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap, no setpriv
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # no engine
    with pytest.raises(SandboxUnavailableError, match='never falls back to level "none"') as e:
        choose_level(SandboxConfig(level="auto"))
    assert "bwrap: " in str(e.value) and "docker: " in str(e.value)
    with pytest.raises(SandboxUnavailableError, match="bwrap not installed"):
        make_sandbox("local")  # the default local level is bwrap, never none


def test_level_none_needs_allow_unsandboxed_in_the_config():
    with pytest.raises(msgspec.ValidationError, match="allow_unsandboxed = true"):
        msgspec.toml.decode(b'[sandbox]\nlevel = "none"\n', type=VerifyConfig)
    cfg = msgspec.toml.decode(b'[sandbox]\nlevel = "none"\nallow_unsandboxed = true\n', type=VerifyConfig)
    assert cfg.sandbox.level == "none"


CONNECT = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
    print("connected")
except OSError as e:
    print(type(e).__name__)
"""


@pytest.mark.parametrize("who", ["root", "nonroot"])
def test_level_none_has_no_network(who):
    # Was: at level none the program connected to 127.0.0.1.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        r = attack(target_for("none", who), CONNECT, str(listener.getsockname()[1]))["result"]
    assert r["error"] == "" and r["stdout"] == "PermissionError\n"


WRITE = """
import sys
try:
    open(sys.argv[1] + "/escaped", "w").write("x")
    print("wrote")
except OSError as e:
    print(type(e).__name__)
"""


def test_level_none_cannot_write_outside_its_work_dir():
    # Was: the program wrote outside its work dir (it shared the verifier's uid).
    open_dir = Path(tempfile.mkdtemp(prefix="rlvr-regression-", dir="/var/tmp"))
    try:
        open_dir.chmod(0o777)  # writable by anyone: only the sandbox can stop the write
        r = attack(target_for("none", "nonroot"), WRITE, str(open_dir))["result"]
        assert r["stdout"] == "PermissionError\n" and not (open_dir / "escaped").exists()
    finally:
        shutil.rmtree(open_dir)


ENVIRON = """
import os
try:
    print(open(f"/proc/{os.getppid()}/environ").read())
except OSError as e:
    print(type(e).__name__)
"""


@pytest.mark.parametrize("level", ["none", "bwrap"])
def test_the_parents_environ_is_unreadable(level):
    # Was: /proc/<ppid>/environ readable at level none (the worker copied the actor's environment).
    r = attack(target_for(level, "nonroot"), ENVIRON)["result"]
    assert r["error"] == "" and SECRET not in r["stdout"]


def test_the_level_and_why_are_logged_at_start_and_in_the_heartbeat():
    # Was: the level in use was never logged.
    actor = VerifyActor(VerifyConfig(sandbox=SandboxConfig(level="bwrap")))
    with structlog.testing.capture_logs() as logs:
        actor._choose_sandbox()
    if actor.sandbox_level != "bwrap":
        pytest.skip(f"bwrap unavailable here: {logs}")
    line = next(e for e in logs if e["event"] == "sandbox_level")
    assert line["level"] == "bwrap" and line["configured"] == "bwrap" and "user, pid, net" in line["why"]
    gauges = actor.heartbeat().gauges
    assert gauges["sandbox_level_bwrap"] == 1.0 and gauges["sandbox_level_none"] == 0.0


def test_bwrap_binds_nothing_of_the_host_beyond_the_system_dirs():
    # A pod's service-account token lives under /var/run/secrets (/run): never bound.
    args = bwrap_args("/usr/bin/python3", 64, 64)
    binds = [args[i + 1] for i, a in enumerate(args) if a in ("--bind", "--ro-bind", "--ro-bind-try", "--dev-bind")]
    assert all(b in ("/usr", "/etc/ld.so.cache", "/etc/localtime") or b.startswith(("/lib", "/bin", "/sbin")) for b in binds), binds
    assert "--bind" not in args and "--dev-bind" not in args
