"""``rlvr-actor config-doc``: every reachable config field, its type, default and comment."""

from __future__ import annotations

import re
from typing import Annotated

import msgspec
import msgspec.inspect as mi
import pytest
from msgspec import Meta

from rlvr.cli.main import main
from rlvr.cli.run_config import Config
from rlvr.cli.commands.config_doc import config_doc, field_comments, undocumented


def _expected_keys(info: mi.StructType, path: str, out: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """(section path, key) of every field reachable from ``info``, walked independently."""
    for f in info.fields:
        out.add((path, f.name))
        t = f.type
        members = t.types if isinstance(t, mi.UnionType) else (t,)
        for s in members:
            if isinstance(s, mi.StructType):
                _expected_keys(s, f"{path}.{f.name}".lstrip("."), out)
    return out


def _documented_rows(doc: str) -> dict[tuple[str, str], str]:
    """(section path, key) -> the row's text, parsed from the Markdown."""
    rows: dict[tuple[str, str], str] = {}
    section = None
    for line in doc.splitlines():
        if line.startswith("## "):
            m = re.match(r"## \[([\w.]+)\]", line)
            section = m.group(1) if m else ""  # "## top level"
        elif line.startswith("| `") and section is not None:
            key = line.split("`")[1]
            rows[(section, key)] = rows.get((section, key), "") + line
    return rows


@pytest.fixture(scope="module")
def doc() -> str:
    return config_doc(Config)


def test_every_field_of_every_reachable_struct_appears(doc):
    expected = _expected_keys(mi.type_info(Config), "", set())
    rows = _documented_rows(doc)
    assert len(expected) > 100  # the walk reached the nested sections and variants
    missing = sorted(k for k in expected if k not in rows)
    assert missing == []
    for section in ("[nats]", "[bus]", "[verify]", "[verify.sandbox.limits]", "[learn.engine.loss]",
                    '[rollout.engine] (kind = "vllm")', '[learn.dataset] (kind = "builtin")',
                    '[learn.engine.schedule] (type = "cosine")'):
        assert f"## {section}\n" in doc


def test_a_fields_comment_is_its_meaning(doc):
    rows = _documented_rows(doc)
    # A comment line above the field.
    assert "NATS server URL(s), comma separated." in rows[("nats", "url")]
    # Two comment lines above, joined.
    assert ("Seconds a consumer may hold a message before JetStream redelivers it. "
            "Long work sends in_progress well inside this window.") in rows[("bus", "ack_wait_s")]
    # A trailing comment on the field's own line.
    assert "local folder with config.json, tokenizer and safetensors" in rows[("rollout.engine", "model")]


def test_types_show_bounds_and_defaults_show_the_value_in_place(doc):
    rows = _documented_rows(doc)
    assert "| int in [1, 256] | `2` |" in rows[("verify", "pool_size")]
    assert "| float in (0, 600] | `10.0` |" in rows[("verify.sandbox.limits", "wall_s")]
    assert '| "file" or "memory" | `"file"` |' in rows[("bus", "storage")]
    # LearnConfig gives [learn.sampling] max_tokens 16, not SamplingParams' own 256.
    assert "| int > 0 | `16` |" in rows[("learn.sampling", "max_tokens")]
    assert "| required |" in rows[("rollout.engine", "model")]
    assert "(optional) | `unset` |" in rows[("learn.engine", "ref_update_every")]
    assert 'kind = "hf" or "vllm" or "trivial" | `kind = "trivial"`' in rows[("rollout", "engine")]


class _Commented(msgspec.Struct):
    """A struct to exercise the comment reader."""

    # Above, one line.
    a: int = 1
    b: str = ""  # trailing
    # First line,
    # second line.
    c: Annotated[float, Meta(gt=0)] = 1.0  # and a trailing one

    # Separated from d by a blank line: not d's comment.

    d: int = 0
    e: int = 0


def test_field_comments_reads_above_and_trailing_comments():
    got = {name: c.text for name, c in field_comments(_Commented).items()}
    assert got == {
        "a": "Above, one line.",
        "b": "trailing",
        "c": "First line, second line. and a trailing one",
        "d": "",
        "e": "",
    }
    assert field_comments(_Commented)["a"].where.endswith(f"test_config_doc.py:{_line_of('    a: int = 1')}")


def _line_of(text: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if line.rstrip("\n") == text)


def test_cli_prints_the_reference(capsys):
    assert main(["config-doc"]) == 0
    assert "## [verify.sandbox.limits]" in capsys.readouterr().out


def test_every_config_field_is_documented():
    missing = undocumented(Config)
    assert missing == [], "config fields without a comment:\n" + "\n".join(missing)
