"""Cases per second of the math verifier against math-verify alone, side by side.

    OMP_NUM_THREADS=1 python bench/verify_math_speed.py [--golds 20] [--group 16] [--repeats 3]
    OMP_NUM_THREADS=1 python bench/verify_math_speed.py --audit [--pool-size 2] [--golds 120] [--group 1]

Sets, labelled (a response built to be right is labelled right): ``gsm8k``
(GSM8K test golds: worked answers ending in ``#### N``, boxed and bare
numbers, wrong numbers) and ``math`` (MATH-500 golds: the worked solutions,
boxed answers, "the answer is" sentences, wrong answers), built from the real
golds in ``data/``; with ``--audit`` also ``smollm2``, real model outputs
(``tests/verify/data/math_smollm2.jsonl``, 228 SmolLM2-135M-Instruct answers
to GSM8K, MATH-500 and arithmetic problems, labelled by hand). Each gold is
shared by a group of ``--group`` responses, as in training, where the
samples of one task share a gold.

Default mode: one process, no worker pool.

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

``--audit``: through the worker pool, as ``rlvr-actor audit --verifier math
--input X.jsonl --pool-size N`` runs it. Each set is written as an audit
input file; the project side is ``rlvr.verify.audit.run_audit`` (the function
that command calls: its ``VerifierPool``, fresh workers per repeat, and its
own ``cases_per_s``, which counts the verifying only, not the pool's
start-up). math-verify alone gets the same parallelism: ``N`` fresh worker
processes per repeat (``spawn``, importing math-verify only), each warmed with
the project workers' own warm-up case, then handed the cases 8 to a message,
each message to whichever worker is idle (so an expensive stretch of the file
does not land on one), timed from the first message to the last answer. So
both sides have ``N`` processes doing the work and start equally cold; the
project's side also pays its parent process (specs, IPC, msgpack) on the same
cores, math-verify's has no such cost: that is the audit path's overhead and
it counts against the project. Same count of processes rather than per-core
figures because the audit's parent is part of what is measured. Agreement
with the labels is reported for both sides. ``--per-core`` adds the most
generous figure for math-verify: one fresh process's rate times ``N``
(perfect scaling: no second process paying its own cold start, no load
imbalance), and the audit's rate against that.
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
SMOLLM2 = ROOT / "tests" / "verify" / "data" / "math_smollm2.jsonl"
# The math verifier's warm-up in every pool worker (rlvr.verify.registry); math-verify's workers run it too.
WARM_RESPONSE, WARM_GOLD = "so the answer is \\boxed{\\frac{1}{2}}", "0.5"
MV_CHUNK = 8  # --audit: cases per message to a math-verify worker, handed to whichever is idle


def _rows(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def _wrong(gold: str) -> str:
    return str(int(gold) + 1) if gold.lstrip("-").isdigit() else gold + "+1"


Case = tuple[str, str, bool]  # response, gold, label (the response is right)


def gsm8k_set(n: int, group: int, rng: random.Random) -> list[Case]:
    cases = []
    for i, r in enumerate(rng.sample(_rows(ROOT / "data" / "gsm8k" / "test.jsonl.gz"), n)):
        gold = r["answer"].split("####")[-1].strip().replace(",", "")
        forms = [
            (r["answer"], True),
            (f"So the total is $\\boxed{{{gold}}}$.", True),
            (gold, True),
            (f"The answer is {_wrong(gold)}.", False),
            (f"#### {_wrong(gold)}", False),
        ]
        for k in range(group):  # every form, even at --group 1
            response, label = forms[(i + k) % len(forms)]
            cases.append((response, gold, label))
    return cases


def math_set(n: int, group: int, rng: random.Random) -> list[Case]:
    cases = []
    for i, r in enumerate(rng.sample(_rows(ROOT / "data" / "math500" / "test.jsonl"), n)):
        gold = r["answer"]
        forms = [
            (r["solution"], True),
            (f"Therefore the answer is $\\boxed{{{gold}}}$.", True),
            (f"The answer is ${gold}$.", True),
            (f"\\boxed{{{_wrong(gold)}}}", False),
        ]
        for k in range(group):  # every form, even at --group 1
            response, label = forms[(i + k) % len(forms)]
            cases.append((response, gold, label))
    return cases


def smollm2_set() -> list[Case]:
    """Real SmolLM2-135M-Instruct answers, labelled by hand (``--group`` does not apply)."""
    return [(r["response"], r["gold"], bool(r["label"])) for r in _rows(SMOLLM2)]


def _cold() -> None:
    """Empty math-verify's own small parse caches, so neither side starts
    with what the other one parsed."""
    from math_verify import parser
    from sympy.core.cache import clear_cache

    for fn in (parser.parse_latex_cached, parser.parse_expr_cached, parser.extract_latex):
        fn.cache_clear()
    clear_cache()  # sympy's own, shared by both


def run_project(cases: list[Case]) -> tuple[float, int]:
    from rlvr.verify.math import MathParams, score_math
    from rlvr.verify.math.scorer import _gold

    _gold.cache_clear()
    _cold()
    started = time.perf_counter()
    ok = sum(score_math(resp, MathParams(gold=gold)).reward == 1.0 for resp, gold, _ in cases)
    return len(cases) / (time.perf_counter() - started), ok


def math_verify_verdicts(cases: list[Case]) -> list[bool]:
    """math-verify alone, as its README calls it, on each case."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    config = [LatexExtractionConfig(), ExprExtractionConfig()]
    verdicts = []
    for resp, gold, _ in cases:
        g = parse(f"${gold}$", config, parsing_timeout=None)
        p = parse(resp, config, parsing_timeout=None)
        verdicts.append(bool(verify(g, p, timeout_seconds=None)))
    return verdicts


def run_math_verify(cases: list[Case]) -> tuple[float, int]:
    _cold()
    started = time.perf_counter()
    ok = sum(math_verify_verdicts(cases))
    return len(cases) / (time.perf_counter() - started), ok


# -- through the audit path


def _mv_worker_init(ready) -> None:
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    math_verify_verdicts([(WARM_RESPONSE, WARM_GOLD, True)])
    ready.wait()  # the clock starts once every worker is here


def audit_math_verify(cases: list[Case], processes: int) -> tuple[float, list[bool]]:
    """math-verify alone in ``processes`` fresh, warmed worker processes; (cases/s, verdicts)."""
    import multiprocessing

    chunks = [cases[k : k + MV_CHUNK] for k in range(0, len(cases), MV_CHUNK)]
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Barrier(processes + 1)
    with ctx.Pool(processes, initializer=_mv_worker_init, initargs=(ready,)) as pool:
        ready.wait()  # every worker started and warm, as the audit's pool is before its clock starts
        started = time.perf_counter()
        parts = pool.map(math_verify_verdicts, chunks, chunksize=1)
        elapsed = time.perf_counter() - started
    return len(cases) / elapsed, [v for part in parts for v in part]


def audit_project(path: Path, processes: int) -> tuple[float, list[bool]]:
    """``rlvr-actor audit --verifier math --input path --pool-size processes``; (cases/s, verdicts)."""
    from rlvr.verify.audit import run_audit

    out = path.with_suffix(".verdicts.jsonl")
    summary = run_audit("math", path, out, pool_size=processes)
    verdicts = [json.loads(line)["outcome"] == "ok" for line in out.read_text().splitlines()]
    return summary.cases_per_s, verdicts


def _agreement(cases: list[Case], verdicts: list[bool]) -> float:
    return sum(v == label for (_, _, label), v in zip(cases, verdicts)) / len(cases)


def main_audit(args: argparse.Namespace, sets: dict[str, list[Case]]) -> dict:
    import tempfile

    result: dict = {"mode": "audit", "pool_size": args.pool_size, "sets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cases in sets.items():
            path = Path(tmp) / f"{name}.jsonl"
            with path.open("w") as f:
                for i, (response, gold, label) in enumerate(cases):
                    f.write(json.dumps({"id": f"{name}-{i}", "response": response, "gold": gold, "label": label}) + "\n")
            project, alone, single = [], [], []
            for k in range(args.repeats):
                if k % 2:  # alternate which goes first
                    m_rate, m_v = audit_math_verify(cases, args.pool_size)
                    p_rate, p_v = audit_project(path, args.pool_size)
                else:
                    p_rate, p_v = audit_project(path, args.pool_size)
                    m_rate, m_v = audit_math_verify(cases, args.pool_size)
                project.append(p_rate)
                alone.append(m_rate)
                if args.per_core:
                    single.append(audit_math_verify(cases, 1)[0])
            p, m = statistics.median(project), statistics.median(alone)
            result["sets"][name] = {
                "cases": len(cases),
                "labelled_right": sum(label for _, _, label in cases),
                "project_cases_per_s": round(p, 1),
                "math_verify_cases_per_s": round(m, 1),
                "ratio": round(p / m, 2),
                "ratios": [round(a / b, 2) for a, b in zip(project, alone)],
                "project_accepted": sum(p_v),
                "math_verify_accepted": sum(m_v),
                "project_agreement": round(_agreement(cases, p_v), 4),
                "math_verify_agreement": round(_agreement(cases, m_v), 4),
            }
            r = result["sets"][name]
            print(
                f"{name:7s} {len(cases)} cases: audit {p:8.1f}/s  math-verify x{args.pool_size} {m:8.1f}/s  "
                f"ratio {p / m:.2f}  (accepted {r['project_accepted']} vs {r['math_verify_accepted']}; "
                f"agreement {100 * r['project_agreement']:.1f}% vs {100 * r['math_verify_agreement']:.1f}%)",
                flush=True,
            )
            if single:
                one = statistics.median(single)
                r["math_verify_one_process_cases_per_s"] = round(one, 1)
                r["ratio_per_core"] = round(p / (args.pool_size * one), 2)
                print(f"{'':8s}math-verify in one process {one:.1f}/s: audit / ({args.pool_size} x that) = {r['ratio_per_core']:.2f}")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--golds", type=int, default=20, help="golds per set")
    ap.add_argument("--group", type=int, default=16, help="responses sharing one gold")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--audit", action="store_true", help="through the audit's worker pool (see above)")
    ap.add_argument("--pool-size", type=int, default=2, help="--audit: worker processes on each side")
    ap.add_argument("--sets", default="math,smollm2,gsm8k", help="--audit: which sets, comma-separated")
    ap.add_argument("--per-core", action="store_true",
                    help="--audit: also time math-verify in one process, against N times its rate")
    ap.add_argument("--note", default="", help="saved with the result (e.g. which code was measured)")
    args = ap.parse_args(argv)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    rng = random.Random(args.seed)
    sets = {"gsm8k": gsm8k_set(args.golds, args.group, rng), "math": math_set(args.golds, args.group, rng)}
    meta: dict = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.processor() or platform.machine(),
        "golds": args.golds,
        "group": args.group,
        "repeats": args.repeats,
        **({"note": args.note} if args.note else {}),
    }
    if args.audit:
        sets["smollm2"] = smollm2_set()
        sets = {name: sets[name] for name in args.sets.split(",")}
        result = {**meta, **main_audit(args, sets)}
    else:
        result = {**meta, **main_one_process(args, sets)}
    if not args.no_save:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        with RESULTS.open("a") as f:
            f.write(json.dumps(result) + "\n")
    return 0


def main_one_process(args: argparse.Namespace, sets: dict[str, list[Case]]) -> dict:
    warm = [c for cases in sets.values() for c in cases[:: args.group][:3]]
    run_project(warm), run_math_verify(warm)  # imports and first-call set-up are not measured
    result: dict = {"sets": {}}
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
    return result


if __name__ == "__main__":
    raise SystemExit(main())
