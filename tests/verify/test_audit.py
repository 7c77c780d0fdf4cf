"""The audit command: verdict rows, and a summary with agreement, FN and FP rates and the disagreeing ids.

The data files hold one deliberately mislabelled positive and one mislabelled
negative, so the accounting has a known answer whatever verifier runs them.
"""

import importlib.util
import json
from pathlib import Path

import pytest

from rlvr.cli.main import main
from rlvr.verify.audit import format_summary, run_audit

DATA = Path(__file__).parent / "data"
HAVE_MATH = importlib.util.find_spec("rlvr.verify.math") is not None
# Math cases when the math verifier exists; the same accounting on exact otherwise.
VERIFIER, PREFIX = ("math", "m") if HAVE_MATH else ("exact", "e")


def test_summary_counts_agreement_and_names_disagreements(tmp_path):
    out = tmp_path / "verdicts.jsonl"
    s = run_audit(VERIFIER, DATA / f"audit_{VERIFIER}.jsonl", out, pool_size=2, timeout_s=30)
    assert (s.cases, s.labelled) == (11, 10)
    assert s.false_negatives == [f"{PREFIX}9-mislabelled"]
    assert s.false_positives == [f"{PREFIX}10-mislabelled"]
    assert s.agreement == pytest.approx(0.8)
    assert s.false_negative_rate == pytest.approx(1 / s.positives)
    assert s.false_positive_rate == pytest.approx(1 / s.negatives)
    assert sum(s.outcomes.values()) == 11 and s.cases_per_s > 0
    assert 0 < s.latency_p50_ms <= s.latency_p99_ms

    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"{PREFIX}{i}" for i in range(1, 9)] + [
        f"{PREFIX}9-mislabelled",
        f"{PREFIX}10-mislabelled",
        f"{PREFIX}11",
    ]
    assert set(rows[0]) >= {"id", "reward", "outcome", "extracted", "latency_ms"}
    assert (rows[0]["reward"], rows[0]["outcome"]) == (1.0, "ok")

    text = format_summary(s)
    assert "agreement 80.00%" in text
    assert f"false-negative rate {100 / s.positives:.2f}% (1 of {s.positives}): {PREFIX}9-mislabelled" in text
    assert f"false-positive rate {100 / s.negatives:.2f}% (1 of {s.negatives}): {PREFIX}10-mislabelled" in text


def _cli(argv):
    return main(["audit", *map(str, argv)])


def test_cli_entry_thresholds_and_spec_errors(tmp_path, capsys):
    cases = tmp_path / "cases.jsonl"
    cases.write_text(
        '{"id": 1, "response": "#### 72", "gold": "72", "label": true}\n'
        '{"id": 2, "response": "#### 7", "gold": "72", "label": true}\n'
        '{"id": 3, "response": "no gold here"}\n'
    )
    out = tmp_path / "v.jsonl"
    args = ["--verifier", "exact", "--input", str(cases), "--output", str(out), "--params", '{"after": "####"}']
    assert _cli(args) == 1  # a case the verifier could not judge fails the audit, with its reason
    captured = capsys.readouterr()
    text = captured.out
    assert "false-negative rate 50.00% (1 of 2): 2" in text
    assert "invalid specs: 3" in text
    assert "not judged (the verifier failed):\n  3: spec_error: " in text and "gold" in text
    assert "misjudged:\n  2: wrong" in text
    assert "1 of 3 cases were not judged" in captured.err
    assert json.loads(out.read_text().splitlines()[2])["outcome"] == "spec_error"

    assert _cli([*args, "--max-fn-rate", "0.1"]) == 1
    assert _cli([*args, "--json"]) == 1
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["false_negatives"] == ["2"]


def test_cli_reads_parquet_and_a_saved_hf_dataset_as_the_learner_does(tmp_path, capsys):
    """`audit --input x.parquet` failed with a UTF-8 decode error (issue 33)."""
    import datasets

    rows = [{"id": "a", "response": "#### 72", "gold": "72", "label": True},
            {"id": "b", "response": "#### 7", "gold": "72", "label": False}]
    data = datasets.Dataset.from_list(rows)
    data.to_parquet(str(tmp_path / "cases.parquet"))
    data.save_to_disk(str(tmp_path / "saved"))
    for source in ("cases.parquet", "saved"):
        args = ["--verifier", "exact", "--input", str(tmp_path / source), "--output", str(tmp_path / "v.jsonl"),
                "--params", '{"after": "####"}', "--json"]
        assert _cli(args) == 0, capsys.readouterr().err
        summary = json.loads(capsys.readouterr().out.splitlines()[-1])
        assert summary["cases"] == 2 and summary["agreement"] == 1.0


def test_cli_unknown_verifier_exits_2(tmp_path, capsys):
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"id": 1, "response": "x", "gold": "x"}\n')
    assert _cli(["--verifier", "mth", "--input", str(cases), "--output", str(tmp_path / "o")]) == 2
    assert "unknown verifier 'mth'" in capsys.readouterr().err
