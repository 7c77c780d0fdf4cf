"""The local sandbox at each isolation level (bwrap, none): it runs programs
with stdin and limits, and reports failures as data. Attacks on it are in
test_sandbox_hostile.py."""

from __future__ import annotations

import os

import pytest

from rlvr.sandbox import (
    SandboxFilesInvalidError,
    SandboxLimits,
    SandboxUnavailableError,
    SandboxUnsandboxedError,
    make_sandbox,
)

LIMITS = SandboxLimits(wall_s=3.0, cpu_s=3, output_bytes=4096)


@pytest.fixture(scope="module", params=["bwrap", "none"])
def box(request):
    try:
        sb = make_sandbox("local", isolation=request.param, allow_unsandboxed=True)
    except SandboxUnavailableError as e:
        pytest.skip(f"isolation {request.param} unavailable here: {e}")
    assert sb.isolation == request.param
    yield sb
    sb.close()


def _py(box, code: str, stdin: str = "", limits: SandboxLimits = LIMITS):
    return box.run({"main.py": code, "pkg/data.txt": "payload"}, ["python3", "main.py"], stdin, limits)


def test_runs_a_program_with_stdin_and_files(box):
    r = _py(box, "import sys\nprint(sys.stdin.read().upper(), open('pkg/data.txt').read())", "hello")
    assert (r.exit_code, r.stdout, r.error, r.timed_out) == (0, "HELLO payload\n", "", False)


def test_exit_code_and_stderr_come_back(box):
    r = _py(box, "import sys\nsys.stderr.write('boom')\nsys.exit(3)")
    assert (r.exit_code, r.stderr, r.error) == (3, "boom", "")


def test_environment_is_built_from_scratch(box, monkeypatch):
    monkeypatch.setenv("RLVR_HOST_SECRET", "s3cret")
    r = _py(box, "import os\nprint(sorted(os.environ))")
    assert "RLVR_HOST_SECRET" not in r.stdout and "s3cret" not in r.stdout


def test_runs_as_an_unprivileged_user(box):
    if os.geteuid() != 0:
        pytest.skip("the per-run uid applies when the caller is root")
    r = _py(box, "import os\nprint(os.getuid())")
    assert int(r.stdout) != 0


def test_wall_clock_kills_the_whole_group(box):
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(60)\nwhile True:\n    pass"
    r = _py(box, code, limits=SandboxLimits(wall_s=1.0, cpu_s=5))
    assert r.timed_out and r.wall_s < 4


def test_cpu_limit_counts_as_timed_out(box):
    r = _py(box, "while True:\n    pass", limits=SandboxLimits(wall_s=10.0, cpu_s=1))
    assert r.timed_out and r.wall_s < 6


def test_output_is_capped(box):
    r = _py(box, "while True:\n    print('y' * 1000)")
    assert r.output_truncated and len(r.stdout) <= LIMITS.output_bytes and not r.timed_out


def test_memory_limit_is_reported(box):
    r = _py(box, "b = bytearray(2 * 1024**3)", limits=SandboxLimits(memory_mb=256))
    assert r.memory_exceeded and r.exit_code != 0


def test_a_missing_program_is_a_program_failure_not_a_sandbox_error(box):
    r = box.run({}, ["python3", "nope.py"], "", LIMITS)
    assert r.exit_code == 2 and r.error == ""


def test_an_unknown_command_is_the_programs_failure(box):
    r = box.run({}, ["/nonexistent/interpreter"], "", LIMITS)
    assert (r.exit_code, r.error) == (127, "")


def test_file_names_cannot_leave_the_work_dir(box):
    with pytest.raises(SandboxFilesInvalidError):
        box.run({"../x.py": ""}, ["python3", "x.py"], "", LIMITS)


def test_an_isolation_that_cannot_run_is_refused_with_the_reason():
    with pytest.raises(SandboxUnavailableError, match="none: no interpreter at /nonexistent/python3"):
        make_sandbox("local", isolation="none", python="/nonexistent/python3", allow_unsandboxed=True)


def test_level_none_is_refused_unless_allowed_on_purpose():
    with pytest.raises(SandboxUnsandboxedError, match="allow_unsandboxed = true"):
        make_sandbox("local", isolation="none")


def test_the_default_local_level_is_bwrap_never_none():
    try:
        sb = make_sandbox("local")
    except SandboxUnavailableError as e:
        assert str(e).startswith("bwrap:")  # it failed loudly rather than drop to none
        return
    assert sb.isolation == "bwrap"
    sb.close()


def test_the_removed_unshare_level_is_refused_by_name():
    with pytest.raises(SandboxUnavailableError, match="'unshare' does not exist"):
        make_sandbox("local", isolation="unshare")
