"""The labelled hard-case set for the math verifier: tests/verify/data/math_cases.jsonl.

One JSON object per line: ``id``, ``response``, ``gold``, ``label`` (true when
the response is correct). It is built by ``build_cases`` below from MATH-500
and GSM8K (positives: the dataset's own solutions and equivalent rewrites;
negatives: off-by-one, wrong sign, inverted or altered fractions, swapped
tuples, open-vs-closed intervals, a dropped list element) plus the
hand-written cases in ``HAND_WRITTEN``. Regenerate with
``python tests/verify/test_math_cases.py``.

Targets: zero false positives, false-negative rate below 1%.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

import pytest

from rlvr.verify.math import MathParams, score_math

HERE = Path(__file__).resolve().parent
CASES = HERE / "data" / "math_cases.jsonl"
DATA = Path(__file__).resolve().parents[2] / "data"

# (response, gold, label): the tricky ones, written by hand.
HAND_WRITTEN: list[tuple[str, str, bool]] = [
    ("\\boxed{0.5}", "\\frac{1}{2}", True),
    ("\\boxed{\\dfrac{1}{2}}", "0.5", True),
    ("\\boxed{\\tfrac12}", "\\frac{1}{2}", True),
    ("\\boxed{0.333}", "\\frac{1}{3}", False),  # policy: 3 significant digits are not enough
    ("\\boxed{0.3333}", "\\frac{1}{3}", True),
    ("\\boxed{0.6667}", "\\frac{2}{3}", True),
    ("\\boxed{0.67}", "\\frac{2}{3}", False),
    ("\\boxed{0.3334}", "\\frac{1}{3}", True),
    ("\\boxed{0.3335}", "\\frac{1}{3}", False),
    ("\\boxed{2.0001}", "2", False),
    ("\\boxed{1.9999}", "2", False),
    ("\\boxed{3.14}", "\\pi", False),
    ("\\boxed{3.1416}", "\\pi", True),
    ("\\boxed{1.4142}", "\\sqrt{2}", True),
    ("\\boxed{1.414}", "\\sqrt{2}", True),
    ("\\boxed{1.41}", "\\sqrt{2}", False),
    ("\\boxed{2\\frac{1}{2}}", "\\frac{5}{2}", True),
    ("\\boxed{2\\frac{1}{2}}", "1", False),
    ("\\boxed{137\\frac12}", "137.5", True),
    ("\\boxed{1\\frac{4}{5}}", "\\frac{9}{5}", True),
    ("\\boxed{10{,}000}", "10000", True),
    ("\\boxed{10,000}", "10000", True),
    ("\\boxed{10,\\!000}", "10{,}000", True),
    ("\\boxed{10,001}", "10000", False),
    ("\\boxed{1,000,000}", "10^6", True),
    ("\\boxed{10 \\text{ cm}}", "10", True),
    ("\\boxed{10\\text{ cm}^2}", "10", True),
    ("\\boxed{11 \\text{ cm}}", "10", False),
    ("\\boxed{\\$18.90}", "18.9", True),
    ("\\boxed{\\$18.90}", "18.09", False),
    ("The total is 42 dollars.", "42", True),
    ("\\boxed{50\\%}", "50", True),
    ("\\boxed{50\\%}", "0.5", True),
    ("\\boxed{0.5}", "50\\%", True),
    ("\\boxed{0.5}", "50", False),
    ("\\boxed{5\\%}", "50\\%", False),
    ("\\boxed{3.2 \\times 10^{5}}", "320000", True),
    ("\\boxed{3.2e5}", "320{,}000", True),
    ("\\boxed{3.2 \\times 10^{4}}", "320000", False),
    ("\\boxed{\\sqrt{45}}", "3\\sqrt{5}", True),
    ("\\boxed{\\sqrt{44}}", "3\\sqrt{5}", False),
    ("\\boxed{\\frac{\\sqrt{3}}{3}}", "\\frac{1}{\\sqrt{3}}", True),
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{1}{\\sqrt{3}}", False),
    ("\\boxed{2\\pi}", "\\pi \\cdot 2", True),
    ("\\boxed{2\\pi r}", "2r\\pi", True),
    ("\\boxed{\\pi r^2}", "2\\pi r", False),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", True),
    ("\\boxed{x^2+2x-1}", "(x+1)^2", False),
    ("\\boxed{\\frac{\\cos x}{\\sin x}}", "\\cot x", True),
    ("\\boxed{\\tan x}", "\\cot x", False),
    ("\\boxed{2k+2}", "2(k+1)", True),
    ("\\boxed{2n+2}", "2(k+1)", False),
    ("\\boxed{x=3}", "3", True),
    ("\\boxed{3}", "x=3", True),
    ("\\boxed{x=4}", "3", False),
    ("\\boxed{x+1=4}", "4", False),
    ("\\boxed{y=2x+3}", "y = 2x + 3", True),
    ("\\boxed{2x - y + 3 = 0}", "y = 2x + 3", True),
    ("\\boxed{2x - y - 3 = 0}", "y = 2x + 3", False),
    ("\\boxed{-5x+7y-11z-4=0}", "5x - 7y + 11z + 4 = 0", True),
    ("\\boxed{(1,2)}", "(1,2)", True),
    ("\\boxed{(2,1)}", "(1,2)", False),
    ("\\boxed{[1,2]}", "(1,2)", False),
    ("\\boxed{[1,2)}", "[1,2]", False),
    ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
    ("\\boxed{(3, \\pi/2)}", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
    ("\\boxed{(\\frac{\\pi}{2}, 3)}", "\\left( 3, \\frac{\\pi}{2} \\right)", False),
    ("\\boxed{(-\\infty, 0]}", "(-\\infty, 0]", True),
    ("\\boxed{(-\\infty, 0)}", "(-\\infty, 0]", False),
    ("\\boxed{(3,\\infty)\\cup(-\\infty,2)}", "(-\\infty, 2) \\cup (3, \\infty)", True),
    ("\\boxed{(-\\infty,2]\\cup(3,\\infty)}", "(-\\infty, 2) \\cup (3, \\infty)", False),
    ("\\boxed{x \\in [-2,7]}", "[-2,7]", True),
    ("\\boxed{[-2,7]}", "x \\in [-2,7]", True),
    ("\\boxed{\\{1,2,3\\}}", "\\{3,2,1\\}", True),
    ("\\boxed{\\{1,2\\}}", "\\{1,2,3\\}", False),
    ("\\boxed{-2, 1}", "1,-2", True),
    ("\\boxed{1, 2}", "1,-2", False),
    ("\\boxed{x=1 \\text{ or } x=-2}", "1,-2", True),
    ("\\boxed{1+\\sqrt{19}, 1-\\sqrt{19}}", "1 \\pm \\sqrt{19}", True),
    ("\\boxed{1+\\sqrt{19}}", "1 \\pm \\sqrt{19}", False),
    ("\\boxed{7, 5, 3}", "3, 5, 7", True),
    ("\\boxed{3, 5}", "3, 5, 7", False),
    ("\\boxed{\\begin{bmatrix} 1 & 2 \\\\ 3 & 4 \\end{bmatrix}}", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", True),
    ("\\boxed{\\begin{pmatrix} 1 & 3 \\\\ 2 & 4 \\end{pmatrix}}", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", False),
    ("\\boxed{\\begin{pmatrix} 0.5 \\\\ -1 \\end{pmatrix}}", "\\begin{pmatrix} 1/2 \\\\ -1 \\end{pmatrix}", True),
    ("\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}", "(1,2)", False),
    ("\\boxed{B}", "\\text{(B)}", True),
    ("\\boxed{(B)}", "B", True),
    ("\\boxed{\\text{(C)}}", "B", False),
    ("The answer is (D).", "D", True),
    ("\\boxed{30^\\circ}", "30", True),
    ("\\boxed{30°}", "30^\\circ", True),
    ("\\boxed{30 \\text{ degrees}}", "30^\\circ", True),
    ("\\boxed{60^\\circ}", "30^\\circ", False),
    ("\\boxed{\\infty}", "\\infty", True),
    ("\\boxed{-\\infty}", "\\infty", False),
    ("\\boxed{\\text{Evelyn}}", "\\text{Evelyn}", True),
    ("\\boxed{evelyn}", "\\text{Evelyn}", True),
    ("\\boxed{\\text{Navin}}", "\\text{Evelyn}", False),
    ("\\boxed{\\text{teas}}", "\\text{east}", False),
    ("\\boxed{40_{9}}", "40_9", True),
    ("\\boxed{40_8}", "40_9", False),
    ("\\boxed{40}", "40_9", False),
    ("\\boxed{-2+7i}", "-2 + 7i", True),
    ("\\boxed{7i-2}", "-2 + 7i", True),
    ("\\boxed{-2-7i}", "-2 + 7i", False),
    ("\\boxed{\\frac{-3}{8}}", "-\\frac{3}{8}", True),
    ("\\boxed{\\frac{3}{8}}", "-\\frac{3}{8}", False),
    ("\\boxed{-\\frac{3}{-8}}", "-\\frac{3}{8}", False),
    ("#### 1,234", "1234", True),
    ("#### 1,243", "1234", False),
    ("So she pays 18 + 2 = 20 in total.\n#### 20", "20", True),
    ("The answer is 19.", "20", False),
    ("I am not sure.", "20", False),
    ("\\boxed{}", "0", False),
    ("\\boxed{9^{9^{9^{9}}}}", "9", False),
    ("\\boxed{2^{10}}", "1024", True),
    ("\\boxed{2^{10}}", "1025", False),
    ("\\boxed{10!}", "3628800", True),
    ("\\boxed{\\binom{5}{2}}", "10", True),
    ("\\boxed{\\log_2 8}", "3", True),
    ("\\boxed{\\sqrt[3]{27}}", "3", True),
    ("\\boxed{\\sqrt[3]{28}}", "3", False),
    ("\\boxed{1}, \\boxed{2}", "2", False),  # hedging between two answers is wrong
    ("\\boxed{15\\frac{39}{40}}, or \\boxed{\\frac{639}{40}}", "\\frac{639}{40}", True),
    ("\\boxed{3} \\boxed{5}", "3, 5", True),
    ("\\boxed{\\boxed{5}}", "5", True),
    ("\\fbox{5}", "5", True),
    ("\\boxed 5", "5", True),
    ("\\boxed 6", "5", False),
    ("$\\boxed{\\frac{1}{2}}$.", "\\frac12", True),
    ("\\boxed{1/2}", "\\frac12", True),
    ("\\boxed{2/1}", "\\frac12", False),
    ("\\boxed{.5}", "\\frac12", True),
    ("\\boxed{5.}", "5", True),
    ("\\boxed{05}", "5", True),
    ("\\boxed{50}", "5", False),
    ("\\boxed{5 \\text{ apples}}", "5", True),
    ("\\boxed{3 \\pi}", "3", False),
    ("\\boxed{3 pi}", "3", False),
    ("\\boxed{3\\sqrt{2}}", "3", False),
    ("\\boxed{3x}", "3", False),
    ("\\boxed{a+b}", "b+a", True),
    ("\\boxed{a-b}", "b-a", False),
    ("\\boxed{p - q}", "p-q", True),
    ("\\boxed{\\frac{11+9a}{20}}", "\\frac{9a+11}{20}", True),
    ("\\boxed{\\frac{11+9a}{21}}", "\\frac{9a+11}{20}", False),
    ("\\boxed{e^{i\\pi}}", "-1", True),
    ("\\boxed{e}", "2.718", True),  # policy: a 4-digit decimal gold matches the exact value
    ("\\boxed{e}", "2.72", False),  # but not a 3-digit one
    ("\\boxed{2.7182818}", "2.718", False),  # two decimals compare exactly
    ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt{2}}{2}", True),
    ("\\boxed{\\frac{\\pi}{6}}", "-\\frac{\\pi}{6}", False),
    ("\\boxed{x^5 - x^4 + x^3 - x^2 + x - 1}", "x^5-x^4+x^3-x^2+x-1", True),
    ("\\boxed{x^5 - x^4 + x^3 - x^2 + x + 1}", "x^5-x^4+x^3-x^2+x-1", False),
    ("\\boxed{(a+5)(b+2)}", "ab+2a+5b+10", True),
    ("\\boxed{(a+2)(b+5)}", "ab+2a+5b+10", False),
    ("\\boxed{6 - 5i}", "6-5i", True),
    ("\\boxed{6 + 5i}", "6-5i", False),
    ("\\boxed{\\text{even}}", "\\text{even}", True),
    ("\\boxed{\\text{odd}}", "\\text{even}", False),
    ("\\boxed{1.0}", "1", True),
    ("\\boxed{1.00001}", "1", False),
    ("\\boxed{-0}", "0", True),
    ("\\boxed{0.0000672}", ".0000672", True),
    ("\\boxed{6.72 \\times 10^{-5}}", ".0000672", True),
    ("\\boxed{6.73 \\times 10^{-5}}", ".0000672", False),
    ("\\boxed{\\frac{1}{2}\\text{ inch}}", "\\frac12", True),
    ("\\boxed{x = \\frac{1}{2}}", "\\frac12", True),
    ("\\boxed{\\$1,000}", "1000", True),
    ("The answer is: 42", "42", True),
    ("**Answer:** 42", "42", True),
    ("\\boxed{\\text{B}}", "B", True),
    ("\\boxed{(B) 42}", "B", True),
    ("\\boxed{\\frac{7}{2}}", "3.5", True),
    ("\\boxed{-\\frac{1}{2}}", "-0.5", True),
    ("\\boxed{\\dfrac{\\sqrt{21}}{5}}", "\\frac{\\sqrt{21}}{5}", True),
    ("\\boxed{r = 5}", "5", True),
    ("\\boxed{f(x) = x^3+3x-6}", "x^3+3x-6", True),
    ("\\boxed{20000/\\pi}", "\\frac{20000}{\\pi}", True),
    ("\\boxed{864 \\text{ inches}^2}", "864 \\mbox{ inches}^2", True),
    ("\\boxed{-2, 1+\\sqrt5, 1-\\sqrt5}", "\\{1\\pm\\sqrt{5},-2\\}", True),
    ("\\boxed{15\\%}", "0.15", True),
    ("\\boxed{3/56}", "\\frac{3}{56}", True),
    ("Final Answer: The final answer is $5$. I hope it is correct.", "5", True),
    ("\\boxed{1, 2}", "12", False),
    ("\\boxed{3 \\text{ or } 4}", "3", False),
    ("\\boxed{3}\\boxed{4}", "3", False),
    ("\\boxed{2i}", "2", False),
    ("\\boxed{1}", "i", False),
    ("\\boxed{\\frac{\\sqrt{3}}{4}}", "\\frac{3\\sqrt{3}}{4}", False),
    ("\\boxed{5x-7y+11z+4}", "5x - 7y + 11z + 4 = 0", False),
    ("\\boxed{y=2x}", "y=-2x", False),
    ("\\boxed{x^2}", "x^3", False),
    ("\\boxed{\\sin^2 x + \\cos^2 x}", "1", True),
    ("\\boxed{\\ln(e^2)}", "2", True),
    ("\\boxed{(1,2,3)}", "(1,2)", False),
    ("\\boxed{\\text{(A)}}", "\\text{(A)}", True),
    ("\\boxed{5\\sqrt{2}}", "\\sqrt{50}", True),
    ("\\boxed{\\frac{1}{x}}", "x^{-1}", True),
    ("\\boxed{\\sqrt{x^2}}", "x", False),  # it is |x|
    ("\\boxed{|x|}", "x", False),
    ("\\boxed{\\frac{x^2-1}{x-1}}", "x+1", True),
    ("\\boxed{3.5 \\text{ hours}}", "3.5", True),
    ("\\boxed{\\pi/6}", "30^\\circ", False),  # documented false negative: no radian/degree conversion
    ("\\boxed{1/0}", "0", False),
    ("\\boxed{0/0}", "0", False),
    ("\\boxed{\\frac{a}{b}}", "\\frac{b}{a}", False),
    ("\\boxed{2^{100}}", "1267650600228229401496703205376", True),
    ("\\boxed{2^{100}+1}", "1267650600228229401496703205376", False),
    ("\\boxed{10^{-20}}", "0", False),
    ("\\boxed{1+10^{-20}}", "1", False),
    ("\\boxed{\\pi + 10^{-14}}", "\\pi", False),
    ("\\boxed{(x+1)^{5000}}", "(1+x)^{5000}", True),
    ("\\boxed{(x+1)^{5000}}", "(1+x)^{4999}", False),
]


def _jsonl(path: Path) -> list[dict]:
    if not path.exists() and path.with_name(path.name + ".gz").exists():
        path = path.with_name(path.name + ".gz")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def _negatives(gold: str) -> list[tuple[str, str]]:
    """Wrong variants of a gold answer: (kind, text). Each rule only fires
    where the variant is certainly not equal to the gold."""
    out: list[tuple[str, str]] = []
    if re.fullmatch(r"-?\d+", gold):
        n = int(gold)
        out += [("plus_one", str(n + 1)), ("minus_one", str(n - 1))]
        if n != 0:
            out.append(("sign", str(-n)))
        if abs(n) >= 10:
            out.append(("times_ten", str(n * 10)))
        return out
    m = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", gold)
    if m is not None:
        sign, a, b = m.group(1), int(m.group(2)), int(m.group(3))
        if a != b:
            out.append(("inverted", f"{sign}\\frac{{{b}}}{{{a}}}"))
        out.append(("numerator_plus_one", f"{sign}\\frac{{{a + 1}}}{{{b}}}"))
        out.append(("sign", f"{'' if sign else '-'}\\frac{{{a}}}{{{b}}}"))
        return out
    m = re.fullmatch(r"(-?\d*\.)(\d+)", gold)
    if m is not None:
        last = int(m.group(2)[-1])
        out.append(("last_digit", m.group(1) + m.group(2)[:-1] + str((last + 1) % 10)))
        return out
    m = re.fullmatch(r"(\d*)\s*\\sqrt\{(\d+)\}", gold)
    if m is not None:
        out.append(("sqrt_plus_one", f"{m.group(1)}\\sqrt{{{int(m.group(2)) + 1}}}"))
        return out
    m = re.fullmatch(r"\\left\(\s*(.+?),\s*(.+?)\s*\\right\)|\((.+?),\s*(.+?)\)", gold)
    if m is not None and "," not in "".join(g or "" for g in m.groups()):
        a, b = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        if a.replace(" ", "") != b.replace(" ", ""):
            out.append(("swapped", f"({b}, {a})"))
        out.append(("closed", f"[{a}, {b}]"))
        return out
    if "," in gold and not re.search(r"[()\[\]{}]|\\!|\d,\d{3}", gold):
        items = [t.strip() for t in gold.split(",")]
        out.append(("dropped_item", ", ".join(items[:-1])))
    return out


def build_cases() -> list[dict]:
    rng = random.Random(31337)
    cases: list[dict] = []

    def add(kind: str, response: str, gold: str, label: bool) -> None:
        cases.append({"id": f"{kind}-{len(cases):04d}", "response": response, "gold": gold, "label": label})

    for response, gold, label in HAND_WRITTEN:
        add("hand", response, gold, label)
    math500 = _jsonl(DATA / "math500" / "test.jsonl")
    for row in rng.sample(math500, 220):
        gold = row["answer"]
        add("math500-solution", row["solution"], gold, True)
        for kind, wrong in _negatives(gold)[:2]:
            add(f"math500-{kind}", row["solution"].replace("\\boxed{" + gold + "}", "\\boxed{" + wrong + "}"), gold, False)
    gsm = _jsonl(DATA / "gsm8k" / "test.jsonl")
    for row in rng.sample(gsm, 120):
        gold = row["answer"].split("####")[-1].strip().replace(",", "")
        add("gsm8k-answer", row["answer"], gold, True)
        kind, wrong = rng.choice(_negatives(gold))
        head = row["answer"].rsplit("####", 1)[0]
        add(f"gsm8k-{kind}", f"{head}#### {wrong}", gold, False)
        add(f"gsm8k-boxed-{kind}", f"So the answer is $\\boxed{{{wrong}}}$.", gold, False)
    return cases


def write_cases() -> None:
    with CASES.open("w") as f:
        for case in build_cases():
            f.write(json.dumps(case, ensure_ascii=False) + "\n")


@pytest.mark.skipif(not DATA.is_dir(), reason=f"data folder missing: {DATA}")
def test_case_file_matches_its_generator():
    assert _jsonl(CASES) == build_cases(), "run: python tests/verify/test_math_cases.py"


@pytest.mark.slow  # about 40 s: 1,134 cases, each parsed by math-verify
def test_labelled_cases_have_no_false_positive_and_under_one_percent_false_negatives():
    cases = _jsonl(CASES)
    positives = [c for c in cases if c["label"]]
    negatives = [c for c in cases if not c["label"]]
    judged = {c["id"]: score_math(c["response"], MathParams(gold=c["gold"])).reward == 1.0 for c in cases}
    false_neg = [c["id"] for c in positives if not judged[c["id"]]]
    false_pos = [c["id"] for c in negatives if judged[c["id"]]]
    print(
        f"\nlabelled math cases: {len(cases)} ({len(positives)} positive, {len(negatives)} negative); "
        f"false negatives {len(false_neg)} ({len(false_neg) / len(positives):.2%}), "
        f"false positives {len(false_pos)} ({len(false_pos) / len(negatives):.2%})"
    )
    print("FN ids:", false_neg, "FP ids:", false_pos)
    assert len(cases) > 300
    assert false_pos == []
    assert len(false_neg) / len(positives) < 0.01


if __name__ == "__main__":
    write_cases()
    print(f"wrote {CASES}")
