"""The import layers (docs/architecture.md) hold, and breaking one fails the check CI runs."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import REPO

ROOTS = ("protocol", "actors", "sandbox", "rollout", "verify", "learner", "cli")


def _lint(root=REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "RLVR_LINT_ROOT": str(root)}
    return subprocess.run(["bash", str(REPO / "scripts" / "lint_imports.sh")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_import_contracts_hold():
    out = _lint()
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 kept, 0 broken" in out.stdout


@pytest.mark.parametrize("module, line", [
    ("learner/example/prepare.py", "from rlvr.cli.run_config import Config  # noqa"),
    ("actors/bus.py", "import rlvr.learner.custody.ledger  # noqa"),
    ("verify/registry.py", "import rlvr.rollout.config  # noqa"),
    ("sandbox/base.py", "import rlvr.verify.config  # noqa"),
    ("sandbox/levels.py", "import rlvr.actors.bus  # noqa"),
    ("learner/train/trainer.py", "import rlvr.learner.example.greedy  # noqa"),
    ("learner/algos/kl.py", "import rlvr.learner.custody.ledger  # noqa"),
    ("learner/watch/tally.py", "import rlvr.learner.train.engine  # noqa"),
])
def test_a_forbidden_import_breaks_a_contract(tmp_path, module, line):
    for root in ROOTS:
        shutil.copytree(REPO / root, tmp_path / root, ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}\n")
    out = _lint(tmp_path)
    assert out.returncode != 0 and "BROKEN" in out.stdout, out.stdout + out.stderr
