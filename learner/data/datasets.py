"""Dataset adapters: each turns records into ``TaskSpec``s (prompt + verifier).

- ``arithmetic``: the built-in, generated integer arithmetic ("37+45=").
  Problems are drawn from the full space (every operand pair), the held-out
  split is removed from training by exact match.
- ``jsonl`` and ``hf``: records from local files, or a Hugging Face dataset
  saved to disk, verl's layout included (``rlvr.learner.data.dataset_records``).
- ``builtin``: GSM8K, MATH, MATH-500, MBPP and HumanEval, shipped in the
  repository's ``data/`` (its README gives the fields each adapter reads, the
  upstream of every file and its licence).
- ``reasoning_gym``: a weighted mix of reasoning-gym's procedural tasks
  (``rlvr.learner.data.dataset_rgym``).

Every spec is checked against the wire's limits here (``check_specs``), so a
record too large or too deep to travel is an error naming it at start-up,
not a dead letter later. Adapters are pure and deterministic for a seed;
they do not know about NATS.
"""

from __future__ import annotations

import ast
import random
import re
import time
from pathlib import Path
from typing import Any, Literal

import msgspec

from rlvr.learner.data.dataset_config import (
    ArithmeticDataset, BuiltinDataset, DatasetConfig, HFDataset, JsonlDataset, ReasoningGymDataset, VerifiersDataset,
)
from rlvr.learner.data.dataset_records import DatasetError, hf_specs, jsonl_specs, read_file, render_prompt
from rlvr.protocol import SamplingParams, Task, VerifierSpec
from rlvr.protocol.tasks import ChatMessage, EnvSpec
from rlvr.protocol.validate import MessageInvalidError, check_record, check_verifier_spec


class TaskSpec(msgspec.Struct, frozen=True):
    dataset: str
    index: int
    prompt: str | list[ChatMessage]
    verifier: VerifierSpec
    level: int | None = None
    # A reference response for supervised warm-up (the answer, or a worked solution).
    reference: str = ""
    # The record's other fields, for reward functions (Task.record).
    record: dict[str, Any] = {}
    # The environment each sample is an episode of (None: single-turn).
    env: EnvSpec | None = None

    def to_task(
        self, *, run: str, task_id: str, n: int, sampling: SamplingParams, policy_version: int,
        purpose: Literal["train", "eval"] = "train",
    ) -> Task:
        """The Task that asks for ``n`` completions of this prompt (the feeder's
        training tasks and the evaluation rounds' held-out tasks alike)."""
        return Task(
            run=run, task_id=task_id, dataset=self.dataset, index=self.index, prompt=self.prompt,
            verifier=self.verifier, n=n, sampling=sampling, policy_version=policy_version,
            created_at=time.time(), purpose=purpose, level=self.level, record=self.record, env=self.env,
        )


class Splits(msgspec.Struct, frozen=True):
    train: list[TaskSpec]
    heldout: list[TaskSpec]


def fill_spec(template: VerifierSpec, **values: Any) -> VerifierSpec:
    """``template`` with every "{gold}"/"{tests}" string in its params replaced."""
    slots = {"{" + k + "}": v for k, v in values.items()}

    def fill(x: Any) -> Any:
        if isinstance(x, str) and x in slots:
            return slots[x]
        if isinstance(x, dict):
            return {k: fill(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [fill(v) for v in x]
        return x

    return VerifierSpec(template.name, fill(dict(template.params)))


def _override(specs: list[TaskSpec], template: VerifierSpec | None) -> list[TaskSpec]:
    if template is None:
        return specs
    out = []
    for t in specs:
        p = t.verifier.params
        out.append(msgspec.structs.replace(t, verifier=fill_spec(template, gold=p.get("gold"), tests=p.get("tests"))))
    return out


def load_splits(cfg: DatasetConfig, *, seed: int) -> Splits:
    splits = _load(cfg, seed)
    if cfg.env is not None:  # every task of the dataset is an episode with that environment
        splits = Splits([msgspec.structs.replace(s, env=cfg.env) for s in splits.train],
                        [msgspec.structs.replace(s, env=cfg.env) for s in splits.heldout])
    check_specs(splits.train)
    check_specs(splits.heldout)
    return splits


def _load(cfg: DatasetConfig, seed: int) -> Splits:
    match cfg:
        case ArithmeticDataset():
            return _arithmetic(cfg, seed)
        case JsonlDataset():
            return _split(_override(jsonl_specs(cfg), cfg.verifier_spec), cfg.holdout, seed)
        case HFDataset():
            train, held = hf_specs(cfg)
            train = _override(train, cfg.verifier_spec)
            if held is not None:
                return Splits(train=train, heldout=_override(held, cfg.verifier_spec))
            return _split(train, cfg.holdout, seed)
        case BuiltinDataset():
            return _split(_override(_builtin(cfg), cfg.verifier), cfg.holdout, seed)
        case ReasoningGymDataset():
            from rlvr.learner.data.dataset_rgym import reasoning_gym_splits

            return reasoning_gym_splits(cfg, seed)
        case VerifiersDataset():
            from rlvr.learner.data.dataset_vf import verifiers_specs

            train, held = verifiers_specs(cfg)
            return Splits(train, held) if held is not None else _split(train, cfg.holdout, seed)
    raise DatasetError(f"unknown dataset config {cfg!r}")


def check_specs(specs: list[TaskSpec]) -> None:
    """Every spec fits the wire (the checks its Task will pass where it is consumed)."""
    for spec in specs:
        try:
            check_verifier_spec(spec.verifier)
            check_record(spec.record)
        except MessageInvalidError as e:
            raise DatasetError(f"{spec.dataset} record {spec.index}: {e.reason}") from None


def _split(items: list[TaskSpec], holdout: int, seed: int) -> Splits:
    if holdout >= len(items):
        raise DatasetError(f"holdout {holdout} leaves no training data ({len(items)} records)")
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    held = {i for i in order[:holdout]}
    return Splits(
        train=[t for i, t in enumerate(items) if i not in held],
        heldout=[items[i] for i in sorted(held)],
    )


# --- built-in arithmetic ---------------------------------------------------------
def arithmetic_answer(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _arithmetic(cfg: ArithmeticDataset, seed: int) -> Splits:
    rng = random.Random(seed)
    if cfg.terms == 2:
        problems = [((a, b), (op,)) for op in cfg.ops for a in range(cfg.max_operand + 1)
                    for b in range(cfg.max_operand + 1)]
        rng.shuffle(problems)
    else:  # too many to enumerate: a seeded draw of distinct chains, in draw order
        seen: dict[tuple, None] = {}
        for _ in range(cfg.chain_problems * 2):
            p = (tuple(rng.randint(0, cfg.max_operand) for _ in range(cfg.terms)),
                 tuple(rng.choice(cfg.ops) for _ in range(cfg.terms - 1)))
            seen.setdefault(p, None)
            if len(seen) == cfg.chain_problems:
                break
        problems = list(seen)
    width = len(str(cfg.max_operand))
    if cfg.holdout >= len(problems):
        raise DatasetError(f"holdout {cfg.holdout} >= {len(problems)} possible problems")
    shown_num = (lambda x: f"{x:0{width}d}") if cfg.pad_operands else str

    def prompt(nums: tuple[int, ...], ops: tuple[str, ...]) -> str | list[ChatMessage]:
        if cfg.prompt_style == "chat" and len(nums) == 2:
            shown = {"*": "\\times"}.get(ops[0], ops[0])
            q = cfg.question.replace("{a}", str(nums[0])).replace("{op}", shown).replace("{b}", str(nums[1]))
            return render_prompt(q, cfg)
        text = shown_num(nums[0]) + "".join(op + shown_num(n) for op, n in zip(ops, nums[1:])) + "="
        return render_prompt(text, cfg) if cfg.prompt_style == "chat" else text

    def spec(i: int, p: tuple[tuple[int, ...], tuple[str, ...]]) -> TaskSpec:
        nums, ops = p
        totals = [nums[0]]
        for op, n in zip(ops, nums[1:]):
            totals.append(arithmetic_answer(totals[-1], op, n))
        gold = str(totals[-1])
        reference = gold
        if cfg.show_steps and len(nums) > 2:  # "12+34=46-56=-10": each running total, then the next operation
            reference = f"{shown_num(nums[0])}{ops[0]}{shown_num(nums[1])}=" + "".join(
                f"{totals[j]}{ops[j]}{shown_num(nums[j + 1])}=" for j in range(1, len(ops))) + gold
        return TaskSpec(
            dataset="arithmetic",
            index=i,
            prompt=prompt(nums, ops),
            verifier=fill_spec(cfg.verifier, gold=gold),
            level=len(str(max(nums))),
            reference=reference,
        )

    specs = [spec(i, p) for i, p in enumerate(problems)]
    # Held-out problems never appear in training: the problem list has no
    # duplicates, so removing the first `holdout` is exact.
    return Splits(train=specs[cfg.holdout :], heldout=specs[: cfg.holdout])


# --- builtin: the public sets in the repository's data/ -----------------------------------
def builtin_data_root(root: str = "") -> Path:
    """Where the ``builtin`` sets live: ``root`` when given, else the repository's ``data/``
    (``data/README.md`` gives each file's upstream and licence)."""
    if root:
        return Path(root)
    return Path(__file__).resolve().parents[2] / "data"


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} with balanced braces."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
    return None


_MATH_INSTRUCTION = "Solve the problem. Put the final answer in \\boxed{{}}.\n\n{problem}"
_GSM8K_INSTRUCTION = "Solve the problem step by step. End with 'The answer is N'.\n\n{question}"
_CODE_INSTRUCTION = "Write a Python function for this task. Reply with one ```python code block.\n\n{text}"


def _builtin(cfg: BuiltinDataset) -> list[TaskSpec]:
    root = builtin_data_root(cfg.root)
    out: list[TaskSpec] = []
    if cfg.name == "gsm8k":
        path = root / "gsm8k" / f"{cfg.split}.jsonl.gz"
        for i, r in enumerate(read_file(path)):
            if "####" not in (r.get("answer") or ""):
                raise DatasetError(f"{path} record {i}: its 'answer' has no '#### <answer>' line (no gold answer)")
            gold = r["answer"].split("####")[-1].strip().replace(",", "")
            prompt = _GSM8K_INSTRUCTION.format(question=r["question"])
            reference = r["answer"].split("####")[0].strip() + f"\nThe answer is {gold}."
            out.append(TaskSpec("gsm8k", i, prompt, VerifierSpec("math", {"gold": gold}), reference=reference))
    elif cfg.name in ("math", "math500"):
        path = root / ("math500/test.jsonl" if cfg.name == "math500" else "math/test.jsonl.gz")
        for i, r in enumerate(read_file(path)):
            gold = r.get("answer") or last_boxed(r.get("solution") or "")
            if not gold:
                raise DatasetError(f"{path} record {i}: no 'answer' and no \\boxed{{}} in its 'solution' (no gold answer)")
            level = r["level"] if isinstance(r["level"], int) else int(re.sub(r"\D", "", r["level"]) or 0)
            if cfg.levels and level not in cfg.levels:
                continue
            prompt = _MATH_INSTRUCTION.format(problem=r["problem"])
            out.append(TaskSpec(cfg.name, i, prompt, VerifierSpec("math", {"gold": gold}), level, r["solution"]))
    elif cfg.name == "mbpp":
        for i, r in enumerate(read_file(root / "mbpp" / "sanitized-mbpp.json")):
            # The entry point: the function the reference defines and the first assert calls.
            defined = {n.name for n in ast.parse(r["code"]).body if isinstance(n, ast.FunctionDef)}
            called = re.findall(r"([A-Za-z_]\w*)\s*\(", r["test_list"][0])
            tests = {"entry_point": next(c for c in called if c in defined), "asserts": r["test_list"]}
            params = {"tests": tests, "setup": "\n".join(r.get("test_imports", []))}
            prompt = _CODE_INSTRUCTION.format(text=r["prompt"] + "\nTests:\n" + "\n".join(r["test_list"][:1]))
            out.append(TaskSpec("mbpp", i, prompt, VerifierSpec("code", params)))
    elif cfg.name == "humaneval":
        for i, r in enumerate(read_file(root / "humaneval" / "HumanEval.jsonl.gz")):
            tests = {"check": r["test"], "entry_point": r["entry_point"]}
            out.append(TaskSpec("humaneval", i, _CODE_INSTRUCTION.format(text=r["prompt"]), VerifierSpec("code", {"tests": tests})))
    if not out:
        raise DatasetError(f"builtin dataset {cfg.name!r} under {root} gave no records")
    if cfg.prompt_style == "chat" or cfg.system_prompt:
        out = [msgspec.structs.replace(s, prompt=render_prompt(s.prompt, cfg)) for s in out]
    return out
