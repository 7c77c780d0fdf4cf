"""Cases per second of the math verifier against math-verify alone, side by side.

    OMP_NUM_THREADS=1 python bench/verify_math_speed.py [--golds 20] [--group 16] [--repeats 3]

One process, no worker pool. Two sets built from the real golds in ``data/``:
``gsm8k`` (GSM8K test: worked answers ending in ``#### N``, boxed and bare
numbers, wrong numbers) and ``math`` (MATH-500: the worked solutions, boxed
answers, "the answer is" sentences, wrong answers). Each gold is shared by a
group of ``--group`` responses, as in training, where the samples of one task
share a gold.

- ``project``: ``score_math(response, MathParams(gold=...))``; its gold cache is
  cleared before every repeat, so each gold is read once per repeat, as a
  fresh worker would.
- ``math_verify``: math-verify alone, as its README calls it: ``parse(gold)``,
  ``parse(response)``, ``verify(gold, answer)`` for every case, with
  ``LatexExtractionConfig`` and ``ExprExtractionConfig`` and timeouts off.

The two run interleaved within each repeat, in alternating order, each
starting from empty caches (math-verify's and sympy's), so machine load and
warm caches favour neither;
the median over repeats is reported with the ratio project / math_verify, and
one JSON line is appended to ``bench/results/verify_math_speed.jsonl``. The
verdicts of both are counted too, so a fast wrong verifier is visible.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import platform
import random
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "verify_math_speed.jsonl"


def _rows(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def _wrong(gold: str) -> str:
    return str(int(gold) + 1) if gold.lstrip("-").isdigit() else gold + "+1"


def gsm8k_set(n: int, group: int, rng: random.Random) -> list[tuple[str, str]]:
    cases = []
    for i, r in enumerate(rng.sample(_rows(ROOT / "data" / "gsm8k" / "test.jsonl.gz"), n)):
        gold = r["answer"].split("####")[-1].strip().replace(",", "")
        forms = [r["answer"], f"So the total is $\\boxed{{{gold}}}$.", gold, f"The answer is {_wrong(gold)}.", f"#### {_wrong(gold)}"]
        cases += [(forms[(i + k) % len(forms)], gold) for k in range(group)]  # every form, even at --group 1
    return cases


def math_set(n: int, group: int, rng: random.Random) -> list[tuple[str, str]]:
    cases = []
    for i, r in enumerate(rng.sample(_rows(ROOT / "data" / "math500" / "test.jsonl"), n)):
        gold = r["answer"]
        forms = [r["solution"], f"Therefore the answer is $\\boxed{{{gold}}}$.", f"The answer is ${gold}$.", f"\\boxed{{{_wrong(gold)}}}"]
        cases += [(forms[(i + k) % len(forms)], gold) for k in range(group)]  # every form, even at --group 1
    return cases


def _cold() -> None:
    """Empty math-verify's own small parse caches, so neither side starts
    with what the other one parsed."""
    from math_verify import parser
    from sympy.core.cache import clear_cache

    for fn in (parser.parse_latex_cached, parser.parse_expr_cached, parser.extract_latex):
        fn.cache_clear()
    clear_cache()  # sympy's own, shared by both


def run_project(cases: list[tuple[str, str]]) -> tuple[float, int]:
    from rlvr.verify.math import MathParams, score_math
    from rlvr.verify.math.scorer import _gold

    _gold.cache_clear()
    _cold()
    started = time.perf_counter()
    ok = sum(score_math(resp, MathParams(gold=gold)).reward == 1.0 for resp, gold in cases)
    return len(cases) / (time.perf_counter() - started), ok


def run_math_verify(cases: list[tuple[str, str]]) -> tuple[float, int]:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    config = [LatexExtractionConfig(), ExprExtractionConfig()]
    _cold()
    started = time.perf_counter()
    ok = 0
    for resp, gold in cases:
        g = parse(f"${gold}$", config, parsing_timeout=None)
        p = parse(resp, config, parsing_timeout=None)
        ok += bool(verify(g, p, timeout_seconds=None))
    return len(cases) / (time.perf_counter() - started), ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--golds", type=int, default=20, help="golds per set")
    ap.add_argument("--group", type=int, default=16, help="responses sharing one gold")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    rng = random.Random(args.seed)
    sets = {"gsm8k": gsm8k_set(args.golds, args.group, rng), "math": math_set(args.golds, args.group, rng)}
    warm = [(r, g) for cases in sets.values() for r, g in cases[:: args.group][:3]]
    run_project(warm), run_math_verify(warm)  # imports and first-call set-up are not measured
    result: dict = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.processor() or platform.machine(),
        "golds": args.golds,
        "group": args.group,
        "repeats": args.repeats,
        "sets": {},
    }
    for name, cases in sets.items():
        project, alone = [], []
        for k in range(args.repeats):
            if k % 2:  # alternate which goes first
                (m_rate, m_ok), (p_rate, p_ok) = run_math_verify(cases), run_project(cases)
            else:
                (p_rate, p_ok), (m_rate, m_ok) = run_project(cases), run_math_verify(cases)
            project.append(p_rate)
            alone.append(m_rate)
        p, m = statistics.median(project), statistics.median(alone)
        result["sets"][name] = {
            "cases": len(cases),
            "project_cases_per_s": round(p, 1),
            "math_verify_cases_per_s": round(m, 1),
            "ratio": round(p / m, 2),
            "project_accepted": p_ok,
            "math_verify_accepted": m_ok,
        }
        print(f"{name:6s} {len(cases)} cases: project {p:8.1f}/s  math-verify {m:8.1f}/s  ratio {p / m:.2f}  (accepted {p_ok} vs {m_ok})")
    if not args.no_save:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        with RESULTS.open("a") as f:
            f.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
