"""The README opens with the two commands and carries the generated config reference."""

from __future__ import annotations

import importlib.util

from tests.conftest import REPO


def _updater():
    spec = importlib.util.spec_from_file_location("update_readme_config", REPO / "scripts" / "update_readme_config.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_starts_with_the_run_and_test_commands():
    head = (REPO / "README.md").read_text().splitlines()[:6]
    assert any("rlvr-actor up" in line and "bootstrap.sh" in line for line in head)
    assert any("scripts/test.sh" in line for line in head)
    assert "scripts/test.sh" in (REPO / ".ci" / "run").read_text()


def test_readme_config_reference_matches_the_config_types():
    up = _updater()
    text = (REPO / "README.md").read_text()
    block = text.split(up.START, 1)[1].split(up.END, 1)[0].strip()
    assert block == up.readme_block().strip(), "run: .venv/bin/python scripts/update_readme_config.py"
