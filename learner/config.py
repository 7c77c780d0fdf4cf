"""Configuration of the learner role (the ``[learn]`` section).

The feeder's datasets are tagged variants (``kind = "arithmetic"`` ...); the
algorithm and DeepSpeed settings live in ``rlvr.learner.engine_config`` and
are attached here as ``[learn.engine]``. Without an engine section the learner
runs "dry": it feeds tasks, assembles and filters groups and reports reward
statistics, but trains nothing (the walking skeleton, and a cheap way to check
rollout and verifier pools before spending GPU hours).
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

from rlvr.learner.engine_config import TrainEngineConfig
from rlvr.protocol.tasks import SamplingParams, VerifierSpec

PositiveInt = Annotated[int, Meta(ge=1)]


class ArithmeticDataset(Struct, frozen=True, forbid_unknown_fields=True, tag="arithmetic", tag_field="kind"):
    """Built-in: generated integer arithmetic ("12+7="), verifiable by exact match."""

    # Operators drawn uniformly.
    ops: tuple[Literal["+", "-", "*"], ...] = ("+", "-")
    # Operands are uniform in [0, max_operand].
    max_operand: Annotated[int, Meta(ge=1)] = 99
    # Problems held out for evaluation, removed from training by exact match.
    holdout: Annotated[int, Meta(ge=0)] = 500
    # Write operands with leading zeros ("07+45="), so every prompt has the
    # same length and each digit the same position: a tiny model learns
    # column arithmetic much faster (the experiment in docs/design.md left-padded).
    pad_operands: bool = True
    # Verifier that scores the answers; "{gold}" in its params becomes the answer.
    verifier: VerifierSpec = VerifierSpec(name="exact", params={"gold": "{gold}"})
    # "bare": the prompt is the problem itself ("12+7="), for models that continue text.
    # "chat": one user message through the model's chat template, worded by `question`
    # (for instruct models; operands are then written without padding).
    prompt_style: Literal["bare", "chat"] = "bare"
    # The user message of prompt_style "chat": "{a}", "{op}" and "{b}" are replaced
    # (op as +, - or \times).
    question: str = "What is {a} {op} {b}? Put the final answer in \\boxed{}."


class JsonlDataset(Struct, frozen=True, forbid_unknown_fields=True, tag="jsonl", tag_field="kind"):
    """Any JSONL or Parquet file with a prompt column and a gold-answer column."""

    # The file: JSON lines (gzipped if it ends in .gz), a .json array of records, or .parquet.
    path: str
    # Record field holding the prompt text (a record without it is an error).
    prompt_field: str = "prompt"
    # Record field holding the gold answer (passed to the verifier as params.gold).
    answer_field: str = "answer"
    # Verifier name; the gold answer is passed as params.gold unless `tests_field` is set.
    verifier: str = "math"
    # Record field holding tests for code tasks, passed as params.tests instead of the
    # answer ("" = use answer_field).
    tests_field: str = ""
    # More verifier params from record fields, {param = "field"}: e.g. {fn_name = "fn_name"}
    # for LeetCode / LiveCodeBench functional tasks (tests_field holds their {input, output} cases).
    params_fields: dict[str, str] = {}
    # A full verifier spec instead (e.g. a composite); "{gold}" / "{tests}" in
    # its params are replaced by the record's answer / tests.
    verifier_spec: VerifierSpec | None = None
    # Records held out for evaluation (a seeded random choice), never trained on.
    holdout: Annotated[int, Meta(ge=0)] = 0


class BuiltinDataset(Struct, frozen=True, forbid_unknown_fields=True, tag="builtin", tag_field="kind"):
    """One of the public sets shipped in the repository's data/, through its adapter."""

    # Which set: GSM8K, MATH (its test set), MATH-500, MBPP (sanitized) or HumanEval.
    name: Literal["gsm8k", "math", "math500", "mbpp", "humaneval"]
    # Directory with the same layout as the repository's data/ ("" = that data/ folder).
    root: str = ""
    # GSM8K file to read; the other sets ship one file each and ignore it.
    split: Literal["train", "test"] = "train"
    # MATH levels to keep (empty = all).
    levels: tuple[int, ...] = ()
    # Records held out for evaluation (a seeded random choice), never trained on.
    holdout: Annotated[int, Meta(ge=0)] = 0
    # Override the adapter's verifier (math for GSM8K/MATH, code for MBPP/HumanEval),
    # e.g. with a composite adding a format reward and overlong shaping;
    # "{gold}" / "{tests}" in its params are replaced per record.
    verifier: VerifierSpec | None = None


DatasetConfig = ArithmeticDataset | JsonlDataset | BuiltinDataset


class EvalConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # Evaluate every this many optimizer steps (0 = only before and after RL).
    every_steps: Annotated[int, Meta(ge=0)] = 0
    # Held-out prompts per evaluation (at most the dataset's holdout).
    prompts: Annotated[int, Meta(ge=0)] = 0
    # Completions per prompt; pass@k is reported for every k in `ks` that is <= n.
    n: PositiveInt = 8
    # The k of each pass@k to report (unbiased estimator over the n completions).
    ks: tuple[int, ...] = (1, 8)
    # Sampling temperature of evaluation (0 = greedy); top_p, top_k, max_tokens and
    # stop come from learn.sampling.
    temperature: Annotated[float, Meta(ge=0)] = 1.0
    # Seconds an evaluation round may take before it reports what it has.
    timeout_s: Annotated[float, Meta(gt=0)] = 600.0


class PrepareConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """What ``rlvr-actor up`` does before it starts the roles (the built-in
    example builds its tiny model and warms it up with SFT here)."""

    # "tiny_arithmetic": train a tokenizer, build a random-init model, SFT it.
    kind: Literal["tiny_arithmetic"] = "tiny_arithmetic"
    # Model size of the tiny model.
    hidden: Annotated[int, Meta(ge=8)] = 128
    # Transformer layers of the tiny model.
    layers: Annotated[int, Meta(ge=1)] = 3
    # Attention heads; hidden / heads must be a head size vLLM's CPU attention supports (32, 64, ...).
    heads: Annotated[int, Meta(ge=1)] = 4
    # Tie the output head to the input embeddings. Off: tied, the tiny model's
    # warm-up stalls on a loss plateau (learner/example/arith_model.py says what was measured).
    tie_embeddings: bool = False
    # Cold-start SFT: stop once greedy held-out pass@1 reaches this target...
    sft_target_pass_at_1: Annotated[float, Meta(ge=0, le=1)] = 0.2
    # ...checked every this many SFT steps, giving up after sft_max_steps.
    sft_check_every: PositiveInt = 50
    # SFT steps at most: the warm-up ends there even below the target.
    sft_max_steps: PositiveInt = 2000
    # Training problems per SFT step (drawn from the train split).
    sft_batch: PositiveInt = 128
    # AdamW learning rate of the SFT warm-up (betas 0.9, 0.99; gradients clipped at 1.0).
    # 2e-3 kept the tiny model on a loss plateau; 1e-3 with untied embeddings passes it within ~300 steps.
    sft_lr: Annotated[float, Meta(gt=0)] = 1e-3
    # SFT steps of linear learning-rate warm-up from 0.
    sft_warmup_steps: Annotated[int, Meta(ge=0)] = 50
    # Held-out prompts the greedy check uses.
    sft_check_prompts: PositiveInt = 200


class LearnConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # Where training and held-out prompts come from: kind = "arithmetic" | "jsonl" | "builtin".
    dataset: DatasetConfig = ArithmeticDataset()
    # Completions per prompt (the GRPO group size G).
    group_size: PositiveInt = 8
    # How rollouts sample training completions ([learn.eval] sets its own temperature).
    sampling: SamplingParams = SamplingParams(temperature=1.0, max_tokens=16)
    # Groups that make one optimizer step (B prompts).
    groups_per_step: PositiveInt = 8
    # Optimizer steps to run (the dry learner counts batches of groups instead).
    steps: PositiveInt = 10
    # Drop a sample when current_version - sample.policy_version > max_staleness.
    max_staleness: Annotated[int, Meta(ge=0)] = 1
    # Tasks outstanding at most (0 = groups_per_step * (max_staleness + 1)).
    max_inflight_tasks: Annotated[int, Meta(ge=0)] = 0
    # DAPO dynamic sampling: drop groups whose reward std is <= zero_variance_eps.
    dynamic_sampling: bool = True
    # Population std of a group's rewards at or below which dynamic sampling drops it.
    zero_variance_eps: Annotated[float, Meta(ge=0)] = 1e-6
    # A group not complete after this many seconds is dropped as "partial".
    group_timeout_s: Annotated[float, Meta(gt=0)] = 600.0
    # Publish weights every this many optimizer steps.
    sync_every: PositiveInt = 1
    # How weights reach the rollouts: "object_store" (the run's JetStream
    # bucket, any machine) or "path" (a directory every replica can read:
    # the same machine or a shared filesystem; no copy through NATS).
    weights_transport: Literal["object_store", "path"] = "object_store"
    # Checkpoint every this many optimizer steps (samples count as consumed only then).
    checkpoint_every: PositiveInt = 10
    # Also keep every this many exported policy versions in the learner's weights/v<N>, for
    # offline evaluation: full HF folders (`rlvr-actor eval --checkpoint`) or LoRA adapters
    # (bench/smollm2_learning.py). 0 = keep only the last two, which the broadcast needs.
    keep_weights_every: Annotated[int, Meta(ge=0)] = 0
    # Task order: "none" (seeded shuffle per epoch), "by_level" (easy first),
    # "pass_rate" (skip prompts the policy always or never solves).
    curriculum: Literal["none", "by_level", "pass_rate"] = "none"
    # pass@k on held-out prompts before, during and after RL (off while eval.prompts = 0).
    eval: EvalConfig = EvalConfig()
    # A preparation step for `up` (the built-in example's model and warm-up).
    prepare: PrepareConfig | None = None
    # The optimizer: DeepSpeed engine, algorithm and loss. Absent = a dry
    # learner that assembles, filters and reports but trains nothing.
    engine: TrainEngineConfig | None = None
    # Where metrics.jsonl, checkpoints and summary.json go ("" = the run dir or ./runs/<run>).
    out_dir: str = ""
    # One learner per run: its lease in the run's KV bucket expires this many seconds after
    # its last renewal (renewed every third of it). A second learner waits that long, then refuses.
    lease_ttl_s: Annotated[float, Meta(ge=1)] = 15.0
    # SCORED's retention (bus.scored_max_age_s / scored_max_bytes) removed samples the learner
    # had not settled (it was down too long): the learner stops and says how many. True
    # continues without them, counting them as dropped "retention_gap".
    allow_retention_gap: bool = False

    def __post_init__(self) -> None:
        # The learner recomputes log-probs at its engine's temperature; they
        # must be those of the distribution the rollouts sampled from.
        if self.engine is not None and abs(self.engine.temperature - self.sampling.temperature) > 1e-9:
            raise ValueError(
                f"learn.engine.temperature ({self.engine.temperature}) must equal "
                f"learn.sampling.temperature ({self.sampling.temperature})"
            )

    @property
    def inflight_limit(self) -> int:
        # Tasks are issued the moment a slot frees, while the current batch
        # forms, so they are generated under the current weights and trained
        # one version later: B x max_staleness outstanding bounds the lag at
        # max_staleness. (B x (max_staleness + 1) would let half the work go
        # stale by one version more and be dropped.)
        return self.max_inflight_tasks or self.groups_per_step * max(1, self.max_staleness)
