"""The learner's step against its tight loop, at the built-in example's batch.

One process, the same model, the same batch, the same threads:

- ``step``: what a learner step costs inside the learner actor's ``Trainer.train`` (items, advantages,
  micro-batches, log-probs, the policy loss, DeepSpeed's backward and AdamW step, metrics) on
  ``--groups`` x ``--group-size`` scored samples of the built-in task (prompts such as "37+45=",
  completions of 2-4 tokens with EOS, behaviour log-probs, rewards that vary within each group);
- ``limit``: the tight forward + backward + AdamW loop of bench/vs_trl/limit.py on rows of the same mean
  prompt and completion lengths.

It prints both medians and their ratio (the issue's bar: step <= 1.25 x limit at the same threads).

    OMP_NUM_THREADS=1 .venv/bin/python bench/learner_step.py --threads 1 --steps 30
    py-spy record -o bench/results/learner_step.svg -- .venv/bin/python bench/learner_step.py --only step

Not covered: the bus, custody and the actor's work around the step (bench/vs_trl.py measures the whole run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def make_groups(groups: int, group_size: int, seed: int = 0):
    """Scored groups shaped like the built-in example's: bare prompts, short integer answers."""
    from rlvr.learner.example.arith_model import build_tokenizer
    from rlvr.protocol import Completion, Sample, SamplingParams, Scored, Verdict, VerifierSpec

    tok = build_tokenizer()
    rng = random.Random(seed)
    eos = tok.eos_token_id
    out = []
    for g in range(groups):
        a, b, op = rng.randint(0, 99), rng.randint(0, 99), rng.choice("+-")
        prompt = tok.encode(f"{a}{op}{b}=", add_special_tokens=False)
        gold = str(a + b if op == "+" else a - b)
        members = []
        for i in range(group_size):
            text = gold if i % 3 == 0 else str(rng.randint(-99, 198))
            ids = tok.encode(text, add_special_tokens=False) + [eos]
            lps = [-rng.uniform(0.01, 3.0) for _ in ids]
            reward = 1.2 if text == gold else 0.2
            sample = Sample(
                run="bench", task_id=f"bench-t{g}", sample_index=i, group_id=f"bench-t{g}", group_size=group_size,
                prompt_ids=prompt, completion=Completion(ids=ids, logprobs=lps), text=text, finish_reason="stop",
                policy_version=0, policy_version_max=0, verifier=VerifierSpec("exact", {"gold": gold}),
                sampling=SamplingParams(max_tokens=7), replica="bench",
            )
            members.append(Scored(sample=sample, verdict=Verdict(reward, "ok", "exact", {"accuracy": reward})))
        out.append(members)
    return out


def engine_config(model_dir: Path):
    """The built-in example's [learn.engine], as cli/builtin.toml sets it."""
    from rlvr.learner.engine_config import TrainEngineConfig
    import msgspec

    return msgspec.convert({
        "model_path": str(model_dir), "zero_stage": 0, "micro_batch_tokens": 8192, "grad_clip": 1.0,
        "temperature": 1.0, "pad_token_id": 0, "optimizer": {"lr": 1e-4, "betas": [0.9, 0.99]},
        "loss": {"eps_low": 0.2, "eps_high": 0.28, "aggregation": "token-mean"},
    }, TrainEngineConfig)


async def time_steps(model_dir: Path, groups, steps: int, warmup: int) -> list[float]:
    from rlvr.learner.train.trainer import Trainer

    trainer = Trainer(engine_config(model_dir), seed=0)
    await trainer.start(None)
    times = []
    try:
        for i in range(warmup + steps):
            t = time.perf_counter()
            await trainer.train(groups)
            if i >= warmup:
                times.append(time.perf_counter() - t)
    finally:
        await trainer.close()
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--groups", type=int, default=32)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--only", choices=["step", "limit"], default=None)
    p.add_argument("--out", type=Path, default=None, help="append the result as a JSON line here")
    args = p.parse_args(argv)

    import torch

    from rlvr.learner.example.arith_model import build_arith_model
    from vs_trl.limit import learner_limit

    torch.set_num_threads(args.threads)
    groups = make_groups(args.groups, args.group_size)
    flat = [sc for g in groups for sc in g]
    prompt_len = statistics.fmean(len(sc.sample.prompt_ids) for sc in flat)
    completion_len = statistics.fmean(len(sc.sample.completion.ids) for sc in flat)
    result: dict = {"threads": args.threads, "rows": len(flat), "prompt_len": round(prompt_len, 2),
                    "completion_len": round(completion_len, 2), "steps": args.steps}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_arith_model(Path(tmp) / "model")
        if args.only in (None, "step"):
            times = asyncio.run(time_steps(model_dir, groups, args.steps, args.warmup))
            result["step_s_median"] = round(statistics.median(times), 4)
            result["step_s_min"] = round(min(times), 4)
        if args.only in (None, "limit"):
            lim = learner_limit(model_dir, rows=len(flat), prompt_len=round(prompt_len),
                                completion_len=round(completion_len), threads=args.threads,
                                steps=args.steps, warmup=args.warmup)
            result["limit_s_median"] = lim["step_s_median"]
    if "step_s_median" in result and "limit_s_median" in result:
        result["step_over_limit"] = round(result["step_s_median"] / result["limit_s_median"], 3)
    line = json.dumps(result)
    print(line)
    if args.out:
        with args.out.open("a") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
