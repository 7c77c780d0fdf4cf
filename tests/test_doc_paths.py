"""The docs name source files by their path in a clone. ``rlvr`` is the package's import name (``rlvr.cli``,
``rlvr.learner``...), no folder of the repository: a path under ``rlvr/`` in a page sends a reader nowhere."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO

PAGES = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
# A source path as a page writes it: `rlvr/...`, outside a longer word or path (`/run/secrets/rlvr/x` is no source).
PACKAGE_PATH = re.compile(r"(?<![\w./-])rlvr/[\w./-]+")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_names_a_source_path_under_the_package_name(page):
    assert PACKAGE_PATH.findall(page.read_text()) == []
