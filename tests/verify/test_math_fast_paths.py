"""The math verifier's fast paths give what the slow path gives, on the corpora.

Two shortcuts skip math-verify's LaTeX parser (a millisecond a call, tens on
first use in a worker):
- ``engine.plain_number``: a plain integer or ``\\frac{a}{b}`` of integers is
  read without the parser. Checked here against math-verify's own reading
  (``parse_answer_slow``: same sympy values, same text) on every gold and
  every located answer of the labelled corpora and on MATH-500 / GSM8K golds.
- ``scorer.Gold``: a short, harmless gold is parsed only when a decision
  needs it. The only verdict that could change is "gold unreadable" (the
  guard refusing the gold), so: every gold of the corpora that is put off
  parses without a refusal, and every gold the guard refuses is parsed at
  once, so it is still unreadable whatever the response (even one written
  exactly as the gold).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from sympy import srepr

from rlvr.verify.math import MathParams, score_math
from rlvr.verify.math.engine import AnswerTooLargeError, parse_answer, parse_answer_slow, plain_number
from rlvr.verify.math.scorer import AnswerRefusedError, Gold, _gold, _lazy_gold, read

HERE = Path(__file__).resolve().parent / "data"
DATA = Path(__file__).resolve().parents[2] / "data"
CORPORA = ("math_corpus.jsonl", "math_cases.jsonl", "math_smollm2.jsonl")


def _jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def _cases() -> list[dict]:
    return [c for name in CORPORA for c in _jsonl(HERE / name)]


def _dataset_golds() -> list[str]:
    golds = []
    if (DATA / "math500" / "test.jsonl").exists():
        golds += [r["answer"] for r in _jsonl(DATA / "math500" / "test.jsonl")]
    if (DATA / "gsm8k" / "test.jsonl.gz").exists():
        golds += [r["answer"].split("####")[-1].strip().replace(",", "") for r in _jsonl(DATA / "gsm8k" / "test.jsonl.gz")]
    return golds


def _spans() -> set[str]:
    """Every located, localised answer span of the corpora: golds and responses."""
    spans = set()
    for c in _cases():
        for text in (c["gold"], c["response"]):
            try:
                reading = read(text, "last_number", MathParams(gold=c["gold"]))
            except (AnswerTooLargeError, AnswerRefusedError, RecursionError):
                continue
            if reading is not None:
                spans.add(reading.span)
    return spans


def _same_reading(span: str) -> None:
    fast, slow = parse_answer(span), parse_answer_slow(span)
    assert [srepr(v) for v in fast.values] == [srepr(v) for v in slow.values], span
    assert [type(v) for v in fast.values] == [type(v) for v in slow.values], span
    assert fast.text == slow.text, span


def test_plain_numbers_read_as_math_verify_reads_them_on_every_corpus_answer():
    spans = _spans() | set(_dataset_golds())
    plain = sorted(s for s in spans if plain_number(s.replace("$", " ").replace("\n", " ").strip()) is not None)
    assert len(plain) > 300  # the fast path is what most answers take
    for span in plain:
        _same_reading(span)


@pytest.mark.parametrize(
    "span",
    ["0", "-0", "7", "-7", "10", "1000000", "9" * 300, "-" + "9" * 300, "\\frac{1}{2}", "\\frac{2}{4}", "\\frac{4}{2}",
     "-\\frac{3}{4}", "\\frac{0}{5}", "-\\frac{0}{5}", "\\frac{12}{1}", "$16$", " 16 ", "\\frac{" + "7" * 300 + "}{3}"],
)
def test_plain_number_forms_read_as_math_verify_reads_them(span):
    assert plain_number(span.replace("$", " ").strip()) is not None
    _same_reading(span)


@pytest.mark.parametrize(
    "span",
    ["007", "1 000", "1,000", "3.5", "0.5", ".5", "3.", "+7", "- 7", "1e5", "\\frac{1}{0}", "\\frac12", "\\dfrac{1}{2}",
     "\\frac{01}{2}", "5\\%", "9" * 301],
)
def test_other_forms_go_to_math_verify(span):
    """Forms math-verify rewrites (``0.5`` to ``\\frac{1}{2}``, ``007`` kept as
    text) or reads oddly are never taken by the fast path."""
    assert plain_number(span) is None


def test_golds_whose_parse_waits_are_never_refused_by_the_guard():
    golds = {c["gold"] for c in _cases()} | set(_dataset_golds())
    waited = 0
    for gold in sorted(golds):
        try:
            reading = read(gold, "last_number", MathParams(gold=gold))
        except (AnswerTooLargeError, AnswerRefusedError, RecursionError):
            continue
        if reading is None or reading.parsed is not None or not _lazy_gold(reading.span):
            continue
        waited += 1
        parse_answer_slow(reading.span)  # raises AnswerTooLargeError if the guard refused it
    assert waited > 500


REFUSED_GOLDS = [
    "2^{2^{2^{2^{2^{2^{2}}}}}}",
    "10^{20000}",
    "5000!",
    "\\binom{5000}{2500}",
    "1" * 1001,
    "x^{x^{x^{x^{x^{x^{x}}}}}}",
    "\\Gamma(5000)",
]


@pytest.mark.parametrize("gold", REFUSED_GOLDS)
def test_a_gold_the_guard_refuses_is_parsed_at_once_and_stays_unreadable(gold):
    _gold.cache_clear()
    with pytest.raises(AnswerTooLargeError):  # reading it (a long gold is searched as prose) or parsing it
        reading = read(gold, "last_number", MathParams(gold=gold))
        assert reading is not None and not _lazy_gold(reading.span)
        Gold(reading)
    for response in (f"\\boxed{{{gold}}}", gold, "\\boxed{3}"):
        verdict = score_math(response, MathParams(gold=gold))
        assert verdict.outcome == "parse_error" and "gold unreadable" in verdict.detail, (response, verdict.detail)
