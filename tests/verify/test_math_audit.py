"""``rlvr-actor audit --verifier math`` names the extraction route of every
case, in the verdict rows and in the summary, through the real worker pool."""

from __future__ import annotations

import json

from rlvr.cli.main import main

CASES = [
    {"id": "boxed", "response": "Thus $\\boxed{\\frac{1}{2}}$.", "gold": "0.5", "label": True},
    {"id": "bare", "response": "\\frac{10}{9}", "gold": "\\frac{10}{9}", "label": True},
    {"id": "answer_is", "response": "The answer is $(6, 1)$.", "gold": "(6,1)", "label": True},
    {"id": "hashes", "response": "3 * 24 = 72\n#### 73", "gold": "72", "label": False},
    {"id": "prose", "response": "Die Antwort ist 1 000 €, denke ich.", "gold": "1000", "label": True},
    {"id": "none", "response": "I do not know.", "gold": "3", "label": False},
]


def test_audit_rows_and_summary_name_the_route(tmp_path, capsys):
    cases = tmp_path / "cases.jsonl"
    cases.write_text("".join(json.dumps(c) + "\n" for c in CASES))
    out = tmp_path / "verdicts.jsonl"
    assert main(["audit", "--verifier", "math", "--input", str(cases), "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["route"] for r in rows] == [c["id"] for c in CASES]
    assert all(r["detail"].startswith(f"route={r['route']};") for r in rows)
    assert [r["outcome"] for r in rows] == ["ok", "ok", "ok", "wrong", "ok", "parse_error"]
    text = capsys.readouterr().out
    assert "answer found by: answer_is 1, bare 1, boxed 1, hashes 1, none 1, prose 1" in text
    assert "false-negative rate 0.00%" in text and "false-positive rate 0.00%" in text
