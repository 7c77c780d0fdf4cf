"""Build the math verifier's labelled corpus: tests/verify/data/math_corpus.jsonl.

    python tests/verify/math_corpus.py

One JSON object per line, readable by ``rlvr-actor audit --verifier math``:
``id``, ``family``, ``form`` (how the answer is written: ``bare``, ``boxed``,
``answer_is``, ``prose``, ``sentence``, or the model's prompt style),
``response``, ``gold``, ``label`` and ``note`` (the named policy that decided
a case the verifiers disagreed on, or how it was labelled).

Families:
- ``smollm2``: real answers of SmolLM2-135M-Instruct to GSM8K test and
  MATH-500 problems (``bench/smollm2_math_responses.py`` generates them;
  ``data/math_smollm2.jsonl`` holds them with their labels, reviewed by
  hand wherever the old verifier, math-verify alone and this verifier
  disagreed);
- ``bare_latex``, ``localised``, ``units``, ``structure``: hand-written hard
  forms (``math_hard_forms``);
- ``worked_gold``: the gold is a whole worked solution (MATH-500's
  ``solution``, GSM8K's ``answer``), the response the final answer or a wrong
  one, in several forms; plus hand-written worked golds.

None of it comes from the project's own rewrite generator.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

from math_hard_forms import hard_cases  # beside this file: pytest and a script run both see it

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CORPUS = HERE / "data" / "math_corpus.jsonl"
SMOLLM2 = HERE / "data" / "math_smollm2.jsonl"

# Worked solutions written by hand: (gold, response, label).
HAND_WORKED = [
    ("We add: $3 + 4 = 7$, so the total is $\\boxed{7}$.", "7", True),
    ("We add: $3 + 4 = 7$, so the total is $\\boxed{7}$.", "The total is 8.", False),
    ("First $2 \\cdot 5 = 10$. Then $10 - 4 = 6$.\n#### 6", "\\boxed{6}", True),
    ("First $2 \\cdot 5 = 10$. Then $10 - 4 = 6$.\n#### 6", "10", False),
    ("Let $x$ be the width. Then $x(x+3) = 10$, so $x = 2$ and the answer is $\\frac{1}{2}$ of $4$, i.e. $\\boxed{2}$.", "x = 2", True),
    ("Completing the square, the vertex is at $\\boxed{(1, -2)}$.", "(1, -2)", True),
    ("Completing the square, the vertex is at $\\boxed{(1, -2)}$.", "(-2, 1)", False),
    ("Solving, $x^2 = 4$ gives $x = \\pm 2$, so the solutions are $\\boxed{-2, 2}$.", "2, -2", True),
    ("Solving, $x^2 = 4$ gives $x = \\pm 2$, so the solutions are $\\boxed{-2, 2}$.", "2", False),
    ("The probability is $\\frac{3}{6} = \\boxed{\\frac{1}{2}}$.", "0.5", True),
    ("The probability is $\\frac{3}{6} = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{3}", False),
]


def _rows(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def _wrong(gold: str) -> str | None:
    """A certainly-wrong answer for an integer or simple fraction gold."""
    if re.fullmatch(r"-?\d+", gold):
        return str(int(gold) + 1)
    m = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", gold)
    if m is not None:
        return f"{m.group(1)}\\frac{{{int(m.group(2)) + 1}}}{{{m.group(3)}}}"
    return None


def worked_gold_cases(seed: int = 2026) -> list[dict]:
    rng = random.Random(seed)
    out: list[dict] = []
    forms = (("bare", "{a}"), ("boxed", "So the answer is $\\boxed{{{a}}}$."), ("answer_is", "The answer is ${a}$."))
    math500 = [r for r in _rows(ROOT / "data" / "math500" / "test.jsonl") if _wrong(r["answer"]) is not None]
    for k, r in enumerate(rng.sample(math500, 30)):
        form, template = forms[k % 3]
        out.append({"family": "worked_gold", "form": form, "response": template.format(a=r["answer"]), "gold": r["solution"], "label": True, "note": ""})
        out.append({"family": "worked_gold", "form": form, "response": template.format(a=_wrong(r["answer"])), "gold": r["solution"], "label": False, "note": ""})
    gsm = _rows(ROOT / "data" / "gsm8k" / "test.jsonl.gz")
    for k, r in enumerate(rng.sample(gsm, 20)):
        gold = r["answer"].split("####")[-1].strip().replace(",", "")
        form, template = forms[k % 3]
        out.append({"family": "worked_gold", "form": form, "response": template.format(a=gold), "gold": r["answer"], "label": True, "note": ""})
        out.append({"family": "worked_gold", "form": form, "response": template.format(a=_wrong(gold)), "gold": r["answer"], "label": False, "note": ""})
    for gold, response, label in HAND_WORKED:
        out.append({"family": "worked_gold", "form": "hand", "response": response, "gold": gold, "label": label, "note": ""})
    return out


def smollm2_cases() -> list[dict]:
    return [
        {"family": "smollm2", "form": r["style"], "response": r["response"], "gold": r["gold"], "label": r["label"], "note": r.get("note", ""), "source": r["id"]}
        for r in _rows(SMOLLM2)
    ]


def build() -> list[dict]:
    rows = smollm2_cases() + hard_cases() + worked_gold_cases()
    seen: dict[str, int] = {}
    out = []
    for row in rows:
        n = seen[row["family"]] = seen.get(row["family"], 0) + 1
        out.append({"id": f"{row['family']}-{n:04d}", **row})
    return out


def write() -> None:
    with CORPUS.open("w") as f:
        for row in build():
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    write()
    print(f"wrote {CORPUS}")
