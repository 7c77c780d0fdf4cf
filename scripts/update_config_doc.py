"""Regenerate docs/config.md, the configuration reference, from the config types.

    .venv/bin/python scripts/update_config_doc.py

It rewrites what stands between the config-doc markers of docs/config.md with what
`rlvr-actor config-doc` prints, and keeps the page's hand-written intro above them
(it writes that intro too when the page does not exist yet). tests/test_readme.py
fails when the page's copy differs from the config types, so the reference cannot
drift.
"""

from __future__ import annotations

import sys
from pathlib import Path

START, END = "<!-- config-doc:start -->", "<!-- config-doc:end -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "config.md"

# The page's own title is `# Configuration reference`, as config-doc's first line is; the
# generated sections (`## [nats]`, `## [learn.engine]`, ...) sit directly under it. So the
# first line is dropped and headings are demoted by this many levels: 0 on this page.
DEMOTE = 0

INTRO = f"""# Configuration reference

Every key of a run config: its type, default and meaning, generated from the config types. Back to the
[README](../README.md).

The config is TOML, decoded into typed structs: an unknown key or a bad value is an error that names
it (`config error in run.toml: Object contains unknown field 'lr' - at '$.learn'`). `examples/` has
commented configs (GSM8K, MATH with format reward and overlong shaping, MBPP/HumanEval with the code
sandbox, a GPU config for Qwen2.5 with vLLM and ZeRO-2, and SmolLM2-135M on CPU). The tables below
are generated from the config types by `rlvr-actor config-doc`, so they cannot drift (a test checks
every field is documented): `.venv/bin/python scripts/update_config_doc.py` rewrites them, and
`tests/test_readme.py` fails when they differ from the types. The parameters a task passes to its
verifier are not config: they travel in each task's verifier spec ([verifiers.md](verifiers.md)).

{START}
{END}
"""


def _demote(line: str) -> str:
    return "#" * DEMOTE + line if line.startswith("#") else line


def config_block() -> str:
    """The generated reference, as it stands between the markers."""
    from rlvr.cli.commands.config_doc import config_doc
    from rlvr.cli.run_config import Config

    lines = config_doc(Config).splitlines()
    body = [_demote(line) for line in lines[1:]]  # lines[0] is the title the page has already
    return "\n".join(body).strip() + "\n"


def main() -> int:
    text = DOC.read_text() if DOC.exists() else INTRO
    if START not in text or END not in text:
        print(f"{DOC}: no {START} ... {END} markers to write between", file=sys.stderr)
        return 1
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(f"{head}{START}\n{config_block()}{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
