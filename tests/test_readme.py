"""The README opens with the two commands and stays short; docs/ holds the rest.

docs/config.md carries the generated config reference, and every relative link in
the README and in docs/ points at a file (and heading) that exists.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from tests.conftest import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_LINES = 250

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
_LINK = re.compile(r"!?\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)


def _updater():
    path = REPO / "scripts" / "update_config_doc.py"
    spec = importlib.util.spec_from_file_location("update_config_doc", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and code spans, where nothing is a link."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: its text, lowercased, punctuation other than
    '-' and '_' dropped, spaces turned into '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, with GitHub's -1, -2 ... for repeats."""
    seen: dict[str, int] = {}
    out = set()
    for match in _HEADING.finditer(_FENCE.sub("", path.read_text())):
        base = github_anchor(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    links = [m.group(2) for m in _LINK.finditer(_prose(path.read_text()))]
    return [t for t in links if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]  # http:, https:, mailto:


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_readme_starts_with_the_run_and_test_commands():
    head = README.read_text().splitlines()[:6]
    assert any("rlvr-actor up" in line and "bootstrap.sh" in line for line in head)
    assert any("scripts/test.sh" in line for line in head)
    assert "scripts/test.sh" in (REPO / ".ci" / "run").read_text()


def test_readme_stays_short():
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_readme_links_the_config_reference_and_the_verifier_guide():
    links = {target.split("#", 1)[0] for target in relative_links(README)}
    assert {"docs/config.md", "docs/verifiers.md"} <= links


def test_every_docs_page_links_back_to_the_readme():
    for page in sorted(DOCS.glob("*.md")):
        if page.name in ("design.md", "architecture.md"):
            continue  # the maintainers' pages, older than the split
        assert "../README.md" in relative_links(page), f"{page.name} has no link back to the README"


def test_every_relative_link_points_at_a_file_and_heading_that_exist():
    broken = []
    for page in _pages():
        for target in relative_links(page):
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading in {dest.name})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_github_anchor_rules():
    assert github_anchor("Sandbox levels") == "sandbox-levels"
    assert github_anchor("The built-in example: what `up` shows") == "the-built-in-example-what-up-shows"
    assert github_anchor('[learn.dataset] (kind = "jsonl")') == "learndataset-kind--jsonl"
    assert github_anchor("Performance: the bus hop, tracing, the learner's memory") == (
        "performance-the-bus-hop-tracing-the-learners-memory"
    )


def test_config_reference_matches_the_config_types():
    up = _updater()
    text = up.DOC.read_text()
    assert up.START in text and up.END in text, f"{up.DOC} has lost its config-doc markers"
    block = text.split(up.START, 1)[1].split(up.END, 1)[0].strip()
    assert block == up.config_block().strip(), "run: .venv/bin/python scripts/update_config_doc.py"
