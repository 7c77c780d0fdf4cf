"""``rlvr-actor eval --checkpoint DIR --data FILE --k 1,8``: pass@k of a checkpoint, offline.

One process, no NATS: a rollout engine (``hf`` or ``vllm``) generates ``n``
completions per prompt, the same ``VerifierPool`` the verifier actor uses
(killable workers, hard timeout) scores them, and the unbiased estimator
(``rlvr.learner.watch.passk``) turns per-prompt correct counts into pass@k. The
result is a JSON report.

A completion is correct when its verdict's outcome is ``ok`` (for a
composite verifier: its accuracy part's outcome; for code: every test
passed). A verification ``timeout`` or ``sandbox_error`` counts as incorrect
for pass@k, never as missing, and is reported separately in ``outcomes``; a
prompt longer than the engine accepts counts as ``n`` incorrect completions
with outcome ``prompt_too_long``.

Not covered: evaluation rounds during a run (``rlvr.learner.watch.eval_rounds``,
through the rollout and verifier pools on the bus).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import msgspec

from rlvr.protocol.samples import OUTCOMES

BUILTIN_NAMES = ("gsm8k", "math", "math500", "mbpp", "humaneval")
# The built-in example's sampling limit ("-99" plus EOS fits in 7 tokens).
ARITHMETIC_MAX_TOKENS = 7
DEFAULT_MAX_TOKENS = 1024
PROMPT_TOO_LONG = "prompt_too_long"


DESCRIPTION = ("pass@k of one checkpoint, or the pass@k curves of several on the same prompts and seeds "
               "(unbiased estimator), offline through an engine.")


class Args(msgspec.Struct, frozen=True, kw_only=True):
    """What to evaluate, as ``add_arguments`` parses it (see its help for each field)."""

    checkpoint: list[str]  # one, or several ("LABEL=PATH" or PATH): pass@k curves on the same prompts
    data: str
    k: str = "1,8"
    n: int | None = None
    temperature: float = 1.0
    max_tokens: int | None = None
    limit: int = 0
    seed: int = 0
    engine: Literal["auto", "hf", "vllm"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    device: str = "cpu"
    max_model_len: int | None = None
    kv_cache_gib: float | None = None
    prompt_field: str | None = None
    answer_field: str | None = None
    tests_field: str = ""
    verifier: str = "math"
    split: Literal["train", "test"] = "test"
    data_root: str = ""
    pool_size: int = 2
    timeout_s: float = 30.0
    output: str | None = None
    keep_completions: int = 64
    prompt_style: Literal["bare", "chat"] = "bare"
    system_prompt: str = ""


class CheckpointNotFoundError(FileNotFoundError):
    """A --checkpoint that is neither an HF model folder nor a run directory holding one."""


class EvalArgumentsInvalidError(ValueError):
    """Arguments that cannot describe an evaluation (k > n, an empty k list...)."""


# --- what to evaluate ---------------------------------------------------------------


def _is_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def resolve_checkpoint(path: str | Path) -> Path:
    """The HF model folder ``path`` names: itself; or, for a run directory, its
    highest complete ``weights/v<N>``, else its ``model`` (the cold-start model)."""
    path = Path(path)
    if _is_model_dir(path):
        return path
    versions = sorted(
        (int(p.name[1:]), p)
        for p in (path / "weights").glob("v*")
        if p.name[1:].isdigit() and _is_model_dir(p)
    )
    if versions:
        return versions[-1][1]
    if _is_model_dir(path / "model"):
        return path / "model"
    raise CheckpointNotFoundError(
        f"{path} is not a model folder (config.json + *.safetensors) nor a run directory "
        "with weights/v<N>/ or model/"
    )


def load_eval_prompts(args: Args) -> tuple[str, list[Any]]:
    """(a short name of the data, its evaluation ``TaskSpec``s, at most ``--limit``)."""
    from rlvr.learner.config import ArithmeticDataset, JsonlDataset, BuiltinDataset
    from rlvr.learner.data.datasets import load_splits

    if args.data == "arithmetic":
        name, specs = "arithmetic", load_splits(ArithmeticDataset(), seed=args.seed).heldout
    elif args.data in BUILTIN_NAMES:
        cfg = BuiltinDataset(name=args.data, split=args.split, root=args.data_root, prompt_style=args.prompt_style,
                             system_prompt=args.system_prompt)
        name, specs = args.data, load_splits(cfg, seed=args.seed).train  # holdout 0: every record
    else:
        cfg = JsonlDataset(
            path=args.data,
            prompt_field=args.prompt_field,
            answer_field=args.answer_field,
            verifier=args.verifier,
            tests_field=args.tests_field,
            prompt_style=args.prompt_style,
            system_prompt=args.system_prompt,
        )
        name, specs = _stem(args.data), load_splits(cfg, seed=args.seed).train
    return name, specs[: args.limit] if args.limit else specs


def _stem(path: str) -> str:
    name = Path(path).name
    for suffix in (".gz", ".jsonl", ".json", ".parquet"):
        name = name.removesuffix(suffix)
    return name


def _context_length(model_dir: Path) -> int | None:
    cfg = json.loads((model_dir / "config.json").read_text())
    for key in ("max_position_embeddings", "n_positions", "max_seq_len"):
        if isinstance(cfg.get(key), int):
            return cfg[key]
    return None


def build_engine_config(args: Args, model: Path, max_tokens: int):
    """The engine config ``--engine`` asks for; ``auto`` is vllm when it imports."""
    from rlvr.rollout.engines.base import HFEngineConfig, VLLMEngineConfig

    kind = args.engine
    if kind == "auto":
        try:
            import vllm  # noqa: F401
        except Exception:  # noqa: BLE001 - any import failure means: use hf
            kind = "hf"
        else:
            kind = "vllm"
    context = _context_length(model)
    if kind == "vllm":
        context = args.max_model_len or min(context or 4096, 32768)
    if context is not None and max_tokens >= context:
        raise EvalArgumentsInvalidError(
            f"--max-tokens {max_tokens} leaves no room for a prompt in the model's context of {context} tokens"
        )
    if kind == "hf":
        return HFEngineConfig(
            model=str(model), dtype=args.dtype if args.dtype != "auto" else "float32",
            device=args.device, max_prompt_tokens=(context - max_tokens) if context else 1 << 20,
        )
    max_model_len = context
    kv = None
    if args.kv_cache_gib is not None:
        kv = int(args.kv_cache_gib * (1 << 30))
    elif not os.environ.get("VLLM_CPU_KVCACHE_SPACE") and not _cuda_available():
        kv = 1 << 30  # vLLM on CPU cannot size its cache itself
    return VLLMEngineConfig(
        model=str(model), dtype=args.dtype, max_model_len=max_model_len,
        max_prompt_tokens=max_model_len - max_tokens, kv_cache_memory_bytes=kv, seed=args.seed,
    )


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


# --- the report ----------------------------------------------------------------------


def pass_at_ks(correct: list[int], n: int, ks: list[int]) -> dict[str, float]:
    """{"k": mean unbiased pass@k} over prompts with ``correct[i]`` of ``n`` right."""
    from rlvr.learner.watch.passk import mean_pass_at_k

    return {str(k): mean_pass_at_k(correct, n, k) for k in ks}


def eval_report(
    *, correct: list[int], n: int, ks: list[int], outcomes: Counter, rewards: list[float],
    indices: list[int] | None = None, **meta: Any,
) -> dict[str, Any]:
    """The JSON report: ``meta`` (model, data, temperature, seconds...) plus the
    figures; ``indices`` are the prompts' record numbers in the data (default 0..)."""
    indices = list(range(len(correct))) if indices is None else indices
    counts = {o: outcomes.get(o, 0) for o in OUTCOMES}
    counts.update({o: c for o, c in outcomes.items() if o not in counts})
    return {
        **meta,
        "n": n,
        "ks": ks,
        "prompts": len(correct),
        "samples": len(correct) * n,
        "pass_at_k": pass_at_ks(correct, n, ks),
        "outcomes": counts,
        "mean_reward": sum(rewards) / len(rewards) if rewards else 0.0,
        "per_prompt": [{"index": i, "correct": c} for i, c in zip(indices, correct, strict=True)],
    }


# --- generation and verification -----------------------------------------------------


async def score_prompts(engine, pool, specs: list, n: int, sampling, concurrency: int = 32, keep: int = 0):
    """(correct count per prompt, outcome counts, every reward, up to ``keep`` completions
    with their prompts and verdicts) for ``specs``."""
    import anyio
    import msgspec

    from rlvr.rollout.engines.base import PromptTooLongError
    from rlvr.verify.registry import VerifyContext

    correct = [0] * len(specs)
    cot = [0] * len(specs)  # right, and every step right (a step verifier's verdicts)
    has_steps = [False]
    outcomes: Counter = Counter()
    rewards: list[float] = []
    kept: list[dict] = []
    limiter = anyio.CapacityLimiter(concurrency)

    async def verify(i: int, spec, gen) -> None:
        ctx = VerifyContext(
            completion_tokens=len(gen.ids), finish_reason=gen.finish_reason, max_tokens=sampling.max_tokens,
            prompt=spec.prompt, record=spec.record, dataset=spec.dataset, completion_ids=list(gen.ids),
        )
        verdict = await pool.verify(spec.verifier, gen.text, ctx)
        outcomes[verdict.outcome] += 1
        rewards.append(verdict.reward)
        correct[i] += verdict.outcome == "ok"
        if verdict.steps:
            has_steps[0] = True
            cot[i] += verdict.outcome == "ok" and all(st.ok for st in verdict.steps)
        if len(kept) < keep:
            prompt = spec.prompt if isinstance(spec.prompt, str) else [[m.role, m.content] for m in spec.prompt]
            kept.append({"index": spec.index, "dataset": spec.dataset, "prompt": prompt, "completion": gen.text,
                         "finish_reason": gen.finish_reason, "reward": verdict.reward, "outcome": verdict.outcome,
                         "extracted": verdict.extracted, "detail": verdict.detail,
                         "components": verdict.components})

    async def one(i: int, spec) -> None:
        async with limiter:
            # A seed per prompt: the same report whatever order prompts finish in.
            params = msgspec.structs.replace(sampling, seed=None if sampling.seed is None else sampling.seed + i)
            try:
                group = await engine.generate(spec.prompt, n, params)
            except PromptTooLongError:
                outcomes[PROMPT_TOO_LONG] += n
                rewards.extend([0.0] * n)
                return
        async with anyio.create_task_group() as tg:
            for gen in group.generations:
                tg.start_soon(verify, i, spec, gen)

    async with anyio.create_task_group() as tg:
        for i, spec in enumerate(specs):
            tg.start_soon(one, i, spec)
    return correct, outcomes, rewards, kept, (cot if has_steps[0] else None)


async def _evaluate(engine_cfg, specs: list, n: int, sampling, args: Args):
    from rlvr.rollout.engines.base import make_engine
    from rlvr.verify.pool import VerifierPool

    names = tuple(sorted({s.verifier.name for s in specs}))
    engine = make_engine(engine_cfg)
    await engine.start()
    try:
        async with VerifierPool(args.pool_size, args.timeout_s, warm=names) as pool:
            return await score_prompts(engine, pool, specs, n, sampling, keep=args.keep_completions)
    finally:
        await engine.close()


# --- CLI -----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "--data is one of:\n"
        "  FILE (.jsonl, .json, .jsonl.gz, .parquet)  every record; --prompt-field, --answer-field,\n"
        "                                   --verifier (and --tests-field for code) say how to read it\n"
        f"  {', '.join(BUILTIN_NAMES)}     the public sets shipped in data/ (every record of --split for gsm8k)\n"
        "  arithmetic                       the built-in example's 500 held-out problems (split with --seed,\n"
        "                                   0 as in the built-in run)\n"
        "--checkpoint is an HF model folder (config.json, tokenizer, *.safetensors) or a run directory\n"
        "(its newest weights/v<N>/, else its model/).\n"
        "A completion is correct when its verdict's outcome is ok; a verification timeout counts as\n"
        "incorrect and is reported separately in the outcome counts."
    )
    parser.add_argument("--checkpoint", required=True, action="append",
                        help="HF model folder or run directory; repeat it (LABEL=PATH) for pass@k curves of "
                        "several, e.g. --checkpoint base=RUN/model --checkpoint rl=RUN")
    parser.add_argument("--data", required=True, help="data file, a builtin set's name, or 'arithmetic' (see below)")
    parser.add_argument("--k", default="1,8", help="comma-separated k values for pass@k (default 1,8)")
    parser.add_argument("--n", type=int, default=None, help="completions per prompt (default: the largest k)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help=f"new tokens per completion (default {ARITHMETIC_MAX_TOKENS} for arithmetic, "
                        f"{DEFAULT_MAX_TOKENS} otherwise)")
    parser.add_argument("--limit", type=int, default=0, help="evaluate only the first N prompts (0 = all)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed, and the arithmetic split's (default 0)")
    parser.add_argument("--engine", choices=("auto", "hf", "vllm"), default="auto",
                        help="generation engine; auto = vllm when it imports, else hf")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto",
                        help="model dtype (auto: vllm decides; float32 for hf)")
    parser.add_argument("--device", default="cpu", help="torch device of the hf engine (default cpu)")
    parser.add_argument("--max-model-len", type=int, default=None,
                        help="vllm context length (default: the model's, at most 32768)")
    parser.add_argument("--kv-cache-gib", type=float, default=None,
                        help="vllm KV cache size in GiB (default: 1 on CPU, vllm's own sizing on GPU)")
    parser.add_argument("--prompt-field", default=None, help="FILE: the prompt field, dotted paths allowed "
                        "(default prompt)")
    parser.add_argument("--answer-field", default=None, help="FILE: the gold-answer field (default answer; in "
                        "verl's layout, detected, reward_model.ground_truth)")
    parser.add_argument("--tests-field", default="", help="FILE: a tests column (code) instead of an answer")
    parser.add_argument("--verifier", default="math", help="FILE: verifier name (default math)")
    parser.add_argument("--split", choices=("train", "test"), default="test", help="gsm8k split (default test)")
    parser.add_argument("--data-root", default="", help="directory laid out like the repository's data/ (default: that folder)")
    parser.add_argument("--pool-size", type=int, default=2, help="verifier worker processes (default 2)")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="hard timeout per verification (default 30)")
    parser.add_argument("--output", default=None, help="report path (default <checkpoint>/eval-<data>.json)")
    parser.add_argument("--keep-completions", type=int, default=64,
                        help="completions kept with their prompts and verdicts in <report>.completions.jsonl "
                        "(default 64; 0 = none)")
    parser.add_argument("--prompt-style", choices=("bare", "chat"), default="bare",
                        help="a string prompt as it is, or as one user message through the chat template "
                        "(a prompt that is a list of messages is always chat)")
    parser.add_argument("--system-prompt", default="", help="a system message before every chat prompt")


def parse_ks(text: str, n: int | None) -> tuple[list[int], int]:
    """(sorted distinct k values, n); n defaults to the largest k and must cover it."""
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        raise EvalArgumentsInvalidError(f"--k {text!r} is not a comma-separated list of integers") from None
    if not ks or ks[0] < 1:
        raise EvalArgumentsInvalidError(f"--k {text!r} needs integers >= 1")
    n = ks[-1] if n is None else n
    if n < ks[-1]:
        raise EvalArgumentsInvalidError(f"pass@{ks[-1]} needs --n >= {ks[-1]}, got {n}")
    return ks, n


def _labelled(items: list[str]) -> list[tuple[str, str]]:
    """(label, path) of each --checkpoint: "LABEL=PATH", or PATH labelled by its folder name."""
    out = []
    for item in items:
        label, sep, path = item.partition("=")
        out.append((label, path) if sep and label and "/" not in label else (Path(item).name or item, item))
    return out


def crossing(ks: list[int], base: dict[str, float], other: dict[str, float]) -> int | None:
    """The first k where ``other``'s lead over ``base`` at the smallest k turns over (the curves cross), or None."""
    diffs = [(k, other[str(k)] - base[str(k)]) for k in ks]
    first = next((d for _, d in diffs if d != 0), 0.0)
    return next((k for k, d in diffs if d * first < 0), None)


def write_curve_plot(path: Path, ks: list[int], curves: list[dict]) -> Path:
    """pass@k against k (log scale) for each checkpoint; CoT-pass@k dashed where there is one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for c in curves:
        line, = ax.plot(ks, [c["pass_at_k"][str(k)] for k in ks], marker="o", ms=3, label=c["label"])
        if c.get("cot_pass_at_k"):
            ax.plot(ks, [c["cot_pass_at_k"][str(k)] for k in ks], ls="--", color=line.get_color(),
                    label=f"{c['label']} (CoT-pass@k)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k (unbiased)")
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run(args: Args) -> int:
    """Run the evaluation ``args`` describe and write its report; 0, or 2 on bad input."""
    import anyio

    from rlvr.learner.data.datasets import DatasetError
    from rlvr.protocol.tasks import SamplingParams
    from rlvr.verify.registry import (
        VerifierPluginError, VerifierSpecError, VerifierUnavailableError, import_paths, load_plugins, resolve,
    )

    started = time.monotonic()
    checkpoints = _labelled(args.checkpoint)
    reports: list[dict] = []
    try:
        ks, n = parse_ks(args.k, args.n)
        models = [(label, resolve_checkpoint(path), path) for label, path in checkpoints]
        data_name, specs = load_eval_prompts(args)
        if not specs:
            raise EvalArgumentsInvalidError(f"{args.data} has no prompts to evaluate")
        # A "package.module:ATTR" verifier named by the operator's data or flags is loaded as a plug-in
        # (here and, through the pool, in its workers), as [verify] plugins loads it in a run.
        load_plugins(sorted({path for spec in specs for path in import_paths(spec.verifier)}))
        for spec in specs:  # a bad verifier name or parameter fails here, before any generation
            resolve(spec.verifier)
        max_tokens = args.max_tokens or (ARITHMETIC_MAX_TOKENS if args.data == "arithmetic" else DEFAULT_MAX_TOKENS)
        # The same prompts, n and seeds for every checkpoint: their curves are comparable.
        sampling = SamplingParams(temperature=args.temperature, max_tokens=max_tokens, seed=args.seed)
        for label, model, _ in models:
            t0 = time.monotonic()
            engine_cfg = build_engine_config(args, model, max_tokens)
            correct, outcomes, rewards, kept, cot = anyio.run(_evaluate, engine_cfg, specs, n, sampling, args)
            report = eval_report(
                correct=correct, n=n, ks=ks, outcomes=outcomes, rewards=rewards, indices=[s.index for s in specs],
                model=str(model), data=args.data, engine=type(engine_cfg).__struct_config__.tag,
                temperature=args.temperature, max_tokens=max_tokens, seed=args.seed,
                seconds=round(time.monotonic() - t0, 3),
            )
            if cot is not None:  # a step verifier: right answer and every step right
                report["cot_pass_at_k"] = pass_at_ks(cot, n, ks)
            reports.append({"label": label, **report, "_kept": kept})
    except (EvalArgumentsInvalidError, CheckpointNotFoundError, DatasetError, VerifierSpecError, VerifierPluginError,
            VerifierUnavailableError) as e:
        print(f"eval: {e}", file=sys.stderr)
        return 2
    first = models[0][2]
    if len(reports) == 1:
        report = reports[0]
        kept = report.pop("_kept")
        report.pop("label")
        out = Path(args.output) if args.output else Path(first) / f"eval-{data_name}.json"
    else:
        kept = []
        for r in reports:
            kept += [{"checkpoint": r["label"], **row} for row in r.pop("_kept")]
        out = Path(args.output) if args.output else Path(first) / f"eval-{data_name}-curves.json"
        report = curves_report(reports, ks, n, args, seconds=round(time.monotonic() - started, 3))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    if len(reports) > 1:
        report["plot"] = str(write_curve_plot(out.with_suffix(".png"), ks, report["checkpoints"]))
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, out)
    if kept:
        completions = out.with_name(f"{out.stem}.completions.jsonl")
        completions.write_text("".join(json.dumps(row) + "\n" for row in kept))
        print(f"completions: {completions} ({len(kept)}, with their verdicts)")
    for r in reports:
        figures = "  ".join(f"pass@{k} {v:.3f}" for k, v in r["pass_at_k"].items())
        shown = ", ".join(f"{o} {c}" for o, c in r["outcomes"].items() if c)
        print(f"{r.get('label', '')}  {figures}  ({r['prompts']} prompts x {n}; {shown}; {r['seconds']:.1f}s, "
              f"{r['engine']})".strip())
    if len(reports) > 1:
        print(f"curves cross at k = {report['crossing_k']}" if report["crossing_k"] else "curves do not cross")
        print(f"plot: {report['plot']}")
    print(f"report: {out}")
    return 0


def curves_report(reports: list[dict], ks: list[int], n: int, args: Args, seconds: float) -> dict:
    """Several checkpoints on the same prompts: each one's pass@k (and CoT-pass@k), its coverage (pass@k at
    the largest k), and where the last checkpoint's curve crosses the first's."""
    keep = ("label", "model", "engine", "pass_at_k", "cot_pass_at_k", "outcomes", "mean_reward", "seconds")
    checkpoints = [{k: r[k] for k in keep if k in r} | {"coverage": r["pass_at_k"][str(ks[-1])]} for r in reports]
    return {
        "data": args.data, "n": n, "ks": ks, "prompts": reports[0]["prompts"], "temperature": args.temperature,
        "seed": args.seed, "seconds": seconds, "checkpoints": checkpoints,
        "crossing_k": crossing(ks, reports[0]["pass_at_k"], reports[-1]["pass_at_k"]),
        "per_prompt": {r["label"]: [p["correct"] for p in r["per_prompt"]] for r in reports},
    }


__all__ = [
    "CheckpointNotFoundError",
    "crossing",
    "curves_report",
    "EvalArgumentsInvalidError",
    "Args",
    "add_arguments",
    "eval_report",
    "load_eval_prompts",
    "parse_ks",
    "pass_at_ks",
    "resolve_checkpoint",
    "run",
    "score_prompts",
]
