"""The code blocks of a docs page, as tests run them: each block's language, the line its text starts on,
and its text. A test that runs a guide's blocks reads them from the page itself, so the page cannot drift
from what was tested."""

from __future__ import annotations

import re
from typing import NamedTuple

from tests.conftest import REPO

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


class Block(NamedTuple):
    doc: str  # the page, relative to the repository
    line: int  # the line of the block's first line of text
    lang: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def code_blocks(doc: str, lang: str | None = None) -> list[Block]:
    """Every fenced block of ``doc`` (``"docs/agents.md"``), or those in ``lang`` only."""
    text = (REPO / doc).read_text()
    out = [Block(doc, text.count("\n", 0, m.start(2)) + 1, m.group(1), m.group(2)) for m in _FENCE.finditer(text)]
    return [b for b in out if lang is None or b.lang == lang]
