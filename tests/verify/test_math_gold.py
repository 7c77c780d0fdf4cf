"""Gold answers of MATH-500 and GSM8K, and equivalent rewrites of them.

Every gold answer must be judged correct as ``\\boxed{gold}`` and in the
dataset's own answer form; over 99.5% of rewrites (generated here, seeded)
must be judged correct. The figures are printed (run with ``-s``).
"""

from __future__ import annotations

import gzip
import json
import random
import re
from fractions import Fraction
from pathlib import Path

import pytest

from rlvr.verify.math import MathParams, score_math

DATA = Path(__file__).resolve().parents[2] / "data"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"data folder missing: {DATA}")


def _jsonl(path: Path) -> list[dict]:
    if not path.exists() and path.with_name(path.name + ".gz").exists():
        path = path.with_name(path.name + ".gz")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def math500() -> list[dict]:
    return _jsonl(DATA / "math500" / "test.jsonl")


def gsm8k_gold(answer: str) -> str:
    return answer.split("####")[-1].strip().replace(",", "")


def gsm8k() -> list[dict]:
    return _jsonl(DATA / "gsm8k" / "test.jsonl")


def _correct(response: str, gold: str) -> bool:
    return score_math(response, MathParams(gold=gold)).reward == 1.0


@pytest.mark.slow  # 1,000 cases through math-verify
@needs_data
def test_every_math500_gold_is_correct_boxed_and_as_its_solution():
    rows = math500()
    failures = [r["unique_id"] for r in rows if not _correct("\\boxed{" + r["answer"] + "}", r["answer"])]
    failures += [r["unique_id"] for r in rows if not _correct(r["solution"], r["answer"])]
    print(f"\nMATH-500 gold: {2 * len(rows) - len(failures)}/{2 * len(rows)} correct (boxed + solution)")
    assert len(rows) == 500 and failures == []


@pytest.mark.slow  # 2,638 cases
@needs_data
def test_every_gsm8k_gold_is_correct_boxed_and_as_its_answer_text():
    rows = gsm8k()
    failures = [i for i, r in enumerate(rows) if not _correct("\\boxed{" + gsm8k_gold(r["answer"]) + "}", gsm8k_gold(r["answer"]))]
    failures += [i for i, r in enumerate(rows) if not _correct(r["answer"], gsm8k_gold(r["answer"]))]
    print(f"\nGSM8K test gold: {2 * len(rows) - len(failures)}/{2 * len(rows)} correct (boxed + '#### N' answer)")
    assert len(rows) == 1319 and failures == []


# ---- rewrites --------------------------------------------------------------

_INT = re.compile(r"^-?\d+$")
_DEC = re.compile(r"^-?\d*\.\d+$")
_FRAC = re.compile(r"^(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")
_DEGREE = re.compile(r"^(.*?)\^\\circ$")


def _squeeze(gold: str) -> str:
    """Drop spaces except where one separates a macro name from a letter."""
    return re.sub(r"(?<![a-zA-Z]) | (?![a-zA-Z0-9])", "", gold)


def _thousands(n: int, sep: str) -> str:
    return f"{n:,}".replace(",", sep)


def _decimal_of(value: Fraction) -> str | None:
    den = value.denominator
    for p in (2, 5):
        while den % p == 0:
            den //= p
    if den != 1:
        return None
    text = f"{float(value):.12f}".rstrip("0").rstrip(".")
    return text if Fraction(text) == value else None


def rewrites(gold: str) -> list[tuple[str, str]]:
    """Equivalent forms of ``gold``: (name, text)."""
    out: list[tuple[str, str]] = []
    squeezed = _squeeze(gold)
    if squeezed != gold:
        out.append(("no_spaces", squeezed))
    spaced = re.sub(r"\s*([=+]|,(?!\\!|\d{3}))\s*", r" \1 ", gold).strip()
    if spaced != gold and not spaced.startswith("+") and "{,}" not in gold:
        out.append(("spaced", spaced))
    if "\\frac" in gold:
        out.append(("dfrac", gold.replace("\\frac", "\\dfrac")))
        out.append(("tfrac", gold.replace("\\frac", "\\tfrac")))
    if _INT.match(gold):
        n = int(gold)
        out += [("decimal_point", f"{n}.0"), ("unit_cm", f"{n} \\text{{ cm}}"), ("unit_dollars", f"\\${n}"),
                ("unit_word", f"{n} units"), ("dollars_text", f"{n}\\text{{ dollars}}"), ("equation", f"x = {n}")]
        if abs(n) >= 1000:
            out += [("thousands_comma", _thousands(n, ",")), ("thousands_latex", _thousands(n, "{,}")),
                    ("thousands_thin", _thousands(n, ",\\!"))]
        if n != 0 and n % 100 == 0:
            exp = len(str(abs(n)).rstrip("0"))
            mant = Fraction(n, 10 ** (len(str(abs(n))) - 1))
            out.append(("scientific", f"{float(mant):g} \\times 10^{{{len(str(abs(n))) - 1}}}"))
            del exp
        if n != 0:
            out.append(("fraction_form", f"\\frac{{{2 * n}}}{{2}}"))
    if _DEC.match(gold):
        value = Fraction(gold)
        out.append(("fraction_for_decimal", f"\\frac{{{value.numerator}}}{{{value.denominator}}}"))
        out.append(("trailing_zero", gold + "0"))
        if gold.startswith("."):
            out.append(("leading_zero", "0" + gold))
    m = _FRAC.match(gold)
    if m is not None:
        value = Fraction(int(m.group(2)), int(m.group(3))) * (-1 if m.group(1) else 1)
        dec = _decimal_of(value)
        out.append(("decimal_for_fraction", dec if dec is not None else f"{float(value):.6f}"))
        out.append(("slash", f"{m.group(1)}{m.group(2)}/{m.group(3)}"))
        out.append(("unreduced", f"{m.group(1)}\\frac{{{3 * int(m.group(2))}}}{{{3 * int(m.group(3))}}}"))
    d = _DEGREE.match(gold)
    if d is not None:
        out += [("degree_sign", d.group(1) + "°"), ("degrees_word", d.group(1) + " degrees"), ("no_degree", d.group(1))]
    if gold.startswith("(") and gold.endswith(")") and "," in gold:
        out.append(("left_right", "\\left" + gold[:-1] + "\\right)"))
    if gold.startswith("\\text{") and gold.endswith("}"):
        out.append(("bare_text", gold[len("\\text{") : -1]))
    if "\\sqrt{" in gold and re.search(r"\\sqrt\{\d\}", gold):
        out.append(("sqrt_no_braces", re.sub(r"\\sqrt\{(\d)\}", r"\\sqrt \1", gold)))
    m = re.match(r"^(\d+)\s*\\sqrt\{(\d+)\}$", gold)
    if m is not None:
        out.append(("sqrt_absorbed", f"\\sqrt{{{int(m.group(1)) ** 2 * int(m.group(2))}}}"))
    m = re.match(r"^(\d+)\s*\\pi$", gold)
    if m is not None:
        out.append(("pi_first", f"\\pi \\cdot {m.group(1)}"))
    terms = gold.split("+")
    if len(terms) == 2 and all(t.strip() for t in terms) and not re.search(r"[-=,{}()\[\]]|\\pm", gold):
        out.append(("commuted_sum", f"{terms[1].strip()} + {terms[0].strip()}"))
    if "," in gold and not re.search(r"[()\[\]{}]|\\!|\d,\d{3}", gold):
        out.append(("reordered_list", ", ".join(reversed([t.strip() for t in gold.split(",")]))))
    if "pmatrix" in gold:
        out.append(("bmatrix", gold.replace("pmatrix", "bmatrix")))
    m = _FRAC.match(gold)
    if m is not None:
        num, den = int(m.group(2)), int(m.group(3))
        if m.group(1):
            out.append(("minus_inside", f"\\frac{{-{num}}}{{{den}}}"))
        if num > den and num % den:
            out.append(("mixed_number", f"{m.group(1)}{num // den}\\frac{{{num % den}}}{{{den}}}"))
    if _INT.match(gold) or _DEC.match(gold):
        out.append(("text_wrapped", f"\\text{{{gold}}}"))
    return out


def math_full_golds(n: int, seed: int) -> list[str]:
    """Gold answers (last box of the solution) of a seeded sample of the full
    MATH test split."""
    from rlvr.verify.math.extract import extract_boxed

    rows = _jsonl(DATA / "math" / "test.jsonl")
    rows = random.Random(seed).sample(rows, n)
    return [g for g in (extract_boxed(r["solution"]) for r in rows) if g is not None]


def _respond(rng: random.Random, text: str) -> str:
    forms = ("\\boxed{%s}", "Therefore, the final answer is $\\boxed{%s}$.", "The answer is $%s$.")
    return rng.choice(forms) % text if "%" not in text else "\\boxed{" + text + "}"


@pytest.mark.slow  # 26,000 rewrites: minutes
@needs_data
def test_rewrites_of_gold_answers_are_judged_correct():
    rng = random.Random(1234)
    golds = [r["answer"] for r in math500()] + [gsm8k_gold(r["answer"]) for r in gsm8k()]
    golds += math_full_golds(2000, seed=7)
    cases = [(g, name, text) for g in golds for name, text in rewrites(g)]
    failures = [(name, g, text) for g, name, text in cases if not _correct(_respond(rng, text), g)]
    rate = 1 - len(failures) / len(cases)
    by_kind: dict[str, int] = {}
    for _, name, _ in cases:
        by_kind[name] = by_kind.get(name, 0) + 1
    print(f"\nrewrites: {len(cases) - len(failures)}/{len(cases)} correct = {rate:.4%} over {len(golds)} golds")
    print("rewrite kinds:", dict(sorted(by_kind.items())))
    for failure in failures[:60]:
        print("  not accepted:", failure)
    assert rate > 0.995
