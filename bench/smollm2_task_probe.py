"""How often SmolLM2-135M-Instruct answers a kind of arithmetic question: the probe that chose
the task of ``examples/smollm2_lora.toml``.

    OMP_NUM_THREADS=2 python bench/smollm2_task_probe.py --model models/smollm2-135m-instruct \\
        --kinds add1,add2,mul1 --prompts box,short --temperatures 1.0,0.7 --max-tokens 48

For each kind of question, prompt wording and temperature it samples 24
seeded questions x 4 answers through the chat template (transformers
``generate``, CPU) and prints the share the math verifier accepts reading
the answer anywhere (``lenient``), only from ``\\boxed{}`` (``strict``), and the
share with a ``\\boxed`` at all. RL needs a task the model sometimes gets
right: a group of answers that are all wrong carries no gradient.
"""

from __future__ import annotations

import argparse
import random
import time

KINDS = {
    "add1": lambda r: (r.randint(0, 9), "+", r.randint(0, 9)),
    "add2": lambda r: (r.randint(10, 60), "+", r.randint(1, 30)),
    "mul1": lambda r: (r.randint(2, 9), "\\times", r.randint(2, 9)),
}
PROMPTS = {
    "box": "What is {q}? Put the final answer in \\boxed{{}}.",
    "short": "What is {q}? Reply with only the final answer in \\boxed{{}}.",
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--kinds", default="add1,add2,mul1")
    p.add_argument("--prompts", default="box")
    p.add_argument("--temperatures", default="1.0")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--questions", type=int, default=24)
    args = p.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.protocol.tasks import VerifierSpec
    from rlvr.verify.registry import resolve

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(args.model)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    rng = random.Random(1)
    for kind in args.kinds.split(","):
        for wording in args.prompts.split(","):
            for temperature in (float(t) for t in args.temperatures.split(",")):
                problems = [KINDS[kind](rng) for _ in range(args.questions)]
                golds = [str(a + b if op == "+" else a * b) for a, op, b in problems]
                texts = [tok.apply_chat_template(
                    [{"role": "user", "content": PROMPTS[wording].format(q=f"{a} {op} {b}")}],
                    add_generation_prompt=True, tokenize=False) for a, op, b in problems]
                enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
                started = time.monotonic()
                with torch.no_grad():
                    out = model.generate(**enc, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                         max_new_tokens=args.max_tokens, num_return_sequences=4,
                                         pad_token_id=tok.pad_token_id)
                answers = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
                lenient = strict = boxed = 0
                for i, text in enumerate(answers):
                    gold = golds[i // 4]
                    lenient += resolve(VerifierSpec("math", {"gold": gold}))(text).outcome == "ok"
                    strict += resolve(VerifierSpec("math", {"gold": gold, "strictness": "boxed"}))(text).outcome == "ok"
                    boxed += "\\boxed" in text
                n = len(answers)
                print(f"{kind} {wording} T={temperature}: lenient {lenient / n:.2f} strict {strict / n:.2f} "
                      f"boxed {boxed / n:.2f} ({n} answers, {time.monotonic() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
