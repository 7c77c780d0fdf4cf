"""Regenerate the configuration reference inside README.md from the config types.

    .venv/bin/python scripts/update_readme_config.py

tests/test_readme.py fails when the README's copy differs from what
`rlvr-actor config-doc` prints, so the reference cannot drift.
"""

from __future__ import annotations

import sys
from pathlib import Path

START, END = "<!-- config-doc:start -->", "<!-- config-doc:end -->"


def readme_block() -> str:
    from rlvr.cli.commands.config_doc import config_doc
    from rlvr.cli.run_config import Config

    lines = config_doc(Config).splitlines()
    body = [("#" + line if line.startswith("## ") else line) for line in lines[1:]]  # demote one level
    return "\n".join(body).strip() + "\n"


def main() -> int:
    readme = Path(__file__).resolve().parents[1] / "README.md"
    text = readme.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{readme_block()}{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
