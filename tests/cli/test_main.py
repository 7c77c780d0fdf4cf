"""The CLI is thin: --help imports nothing heavy, and the verifier role never imports torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlvr.cli.main import COMMANDS, main

HEAVY = ("torch", "vllm", "deepspeed", "transformers", "sympy", "nats", "opentelemetry")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True,
    )
    return set(out.stdout.split()[-1000000:])


@pytest.mark.parametrize("argv", [[], *([c] for c in COMMANDS)], ids=lambda a: a[0] if a else "role")
def test_help_answers_and_imports_nothing_heavy(argv):
    out = subprocess.run([sys.executable, "-m", "rlvr.cli", *argv, "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and ("--role" in out.stdout if not argv else f"rlvr-actor {argv[0]}" in out.stdout)
    mods = _modules_after(
        "import contextlib, io\nfrom rlvr.cli.main import main\n"
        f"with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()): main({[*argv, '--help']!r})"
    )
    assert not {m.split(".")[0] for m in mods} & set(HEAVY)


def test_an_argument_the_command_s_struct_refuses_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["status", "--wait", "nan-ish"])
    assert e.value.code == 2 and "--wait" in capsys.readouterr().err


def test_verify_role_never_imports_torch():
    mods = _modules_after(
        "from rlvr.cli.run_config import load_config\n"
        "from rlvr.cli.roles import _factory\n"
        "actor = _factory('verify', load_config(None))()\n"
        "import rlvr.verify.math, rlvr.verify.code, rlvr.verify.pool\n"
    )
    roots = {m.split(".")[0] for m in mods}
    assert "torch" not in roots and "transformers" not in roots and "vllm" not in roots


def test_bad_config_exits_2_and_names_the_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[verify]\npool_sizes = 2\n")
    out = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "--role", "verify", "--config", str(bad)],
        capture_output=True, text=True,
    )
    assert out.returncode == 2 and "pool_sizes" in out.stderr


def test_unreachable_nats_is_a_clear_nonzero_exit(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[nats]\nconnect_timeout_s = 1.0\n")
    out = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "--role", "verify", "--config", str(cfg), "--nats", "nats://127.0.0.1:9"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 3 and "cannot reach NATS" in out.stdout + out.stderr
