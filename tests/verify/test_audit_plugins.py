"""`rlvr-actor audit --verifier pkg.mod:ATTR` loads the plug-in it is given: a Verifier, a verl-style
function and a TRL-style function, each audited on real model answers labelled by another judge.

The answers are SmolLM2-135M-Instruct's to the byo example's word problems
(tests/data/real_answers/, made by bench/real_answers.py), labelled by the
built-in math verifier's boxed route: all 360 are wrong (the model never
boxes the right number), so they test that no function rewards a wrong
answer. The right answers are the same real responses with the gold appended
in a box (labelled true by construction), and the decoys those with a wrong
number boxed (labelled false): real text around the answer either way.
Before the fix, audit looked the name up before loading any plug-in and
refused every one ("unknown verifier").
"""

from __future__ import annotations

import json

import pytest

from rlvr.cli.main import main
from tests.conftest import REPO

ANSWERS = REPO / "tests" / "data" / "real_answers" / "byo_words.jsonl"
PLUGINS = ["my_rewards:BOXED", "my_rewards:compute_score", "my_rewards:boxed_answer_reward"]


@pytest.fixture
def cases(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "examples" / "byo"))
    path = tmp_path / "cases.jsonl"
    real = [json.loads(line) for line in ANSWERS.read_text().splitlines() if line.strip()]
    right = [{**r, "id": f"{r['id']}-right", "response": f"{r['response']}\n\nSo the answer is \\boxed{{{r['gold']}}}.",
              "label": True} for r in real[::6]]
    decoy = [{**r, "id": f"{r['id']}-decoy", "response": f"{r['response']}\n\n\\boxed{{{int(r['gold']) + 1}}}",
              "label": False} for r in real[1::6]]
    rows = real + right + decoy
    # A TRL function reads its columns from the record, as it would from the dataset in a run.
    path.write_text("".join(json.dumps({**r, "record": {"ground_truth": r["gold"]}}) + "\n" for r in rows))
    return path, rows


@pytest.mark.parametrize("plugin", PLUGINS)
def test_each_kind_of_reward_function_is_audited_on_real_answers(plugin, cases, tmp_path, capsys):
    path, rows = cases
    out = tmp_path / "verdicts.jsonl"
    code = main(["audit", "--verifier", plugin, "--input", str(path), "--output", str(out), "--json",
                 "--max-fn-rate", "0", "--max-fp-rate", "0"])
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert code == 0, summary
    assert summary["labelled"] == len(rows) and summary["positives"] == 60 and summary["negatives"] == 420
    assert summary["agreement"] == 1.0 and summary["verifier"] == plugin
    verdicts = [json.loads(line) for line in out.read_text().splitlines()]
    assert {v["outcome"] for v in verdicts} <= {"ok", "wrong", "parse_error"}  # never an error on these


def test_a_plug_in_that_does_not_import_is_a_usage_error_naming_it(tmp_path, capsys):
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps({"id": 1, "response": "x", "gold": "1"}) + "\n")
    assert main(["audit", "--verifier", "no_such_module:fn", "--input", str(path),
                 "--output", str(tmp_path / "o.jsonl")]) == 2
    assert "cannot import 'no_such_module'" in capsys.readouterr().err
