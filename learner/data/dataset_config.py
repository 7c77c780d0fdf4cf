"""The ``[learn.dataset]`` variants: where prompts and their answers come from.

Tagged by ``kind``: ``arithmetic`` (built in, generated), ``jsonl`` (a local
JSONL, JSON or Parquet file), ``hf`` (a Hugging Face ``datasets`` folder saved
with ``save_to_disk``, or local parquet/jsonl/json/arrow files read through
``datasets``), ``builtin`` (GSM8K, MATH, MATH-500, MBPP, HumanEval, shipped in
``data/``), and ``reasoning_gym`` (procedural tasks from the
``reasoning-gym`` package), and ``verifiers`` (a ``verifiers`` environment's
tasks, as episodes of it). ``docs/your-task.md`` and ``docs/environments.md``
are the guides; the adapters
are ``rlvr.learner.data.datasets`` and its helpers.

Every kind renders prompts the same way (``PromptStyle``): a record whose
prompt is a list of ``{role, content}`` messages is sent as chat messages; a
string prompt is sent as it is (``bare``) or as one user message through the
model's chat template (``chat``), after an optional system prompt.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from rlvr.protocol.tasks import EnvSpec, VerifierSpec

Holdout = Annotated[int, Meta(ge=0)]


class PromptStyle(Struct, frozen=True, forbid_unknown_fields=True):
    # "bare": a string prompt is sent as it is, for models that continue text.
    # "chat": a string prompt becomes one user message through the model's chat template
    # (for instruct models). A prompt that is a list of {role, content} messages is always chat.
    prompt_style: Literal["bare", "chat"] = "bare"
    # A system message put before every chat prompt that has none ("" = none).
    system_prompt: str = ""
    # Make every task a multi-turn episode with this environment ({name, params, max_turns,
    # max_tokens}; docs/environments.md); none: one completion per sample.
    env: EnvSpec | None = None


class RecordDataset(PromptStyle, frozen=True, forbid_unknown_fields=True):
    """What the record-reading kinds (``jsonl``, ``hf``) share: which fields hold what."""

    # Field names may be dotted paths into nested records: "reward_model.ground_truth".
    # "auto" reads verl's layout (data_source, prompt, ability, reward_model, extra_info)
    # when the first record has data_source, prompt and reward_model; "plain" otherwise.
    layout: Literal["auto", "plain", "verl"] = "auto"
    # The prompt: a string, or a list of {role, content} messages. Default: "prompt".
    prompt_field: str | None = None
    # The gold answer, passed to the verifier as params.gold.
    # Default: "answer" ("plain"), "reward_model.ground_truth" ("verl").
    answer_field: str | None = None
    # Verifier name (a built-in, or a "package.module:ATTR" listed in [verify] plugins);
    # the gold answer is its params.gold unless `tests_field` is set.
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
    # Record fields that travel with the task to reward functions (TRL's keyword
    # columns, verl's data_source and extra_info: VerifyContext.record).
    # None = every field but the prompt; [] = none.
    record_fields: list[str] | None = None
    # Records held out for evaluation (a seeded random choice), never trained on.
    holdout: Holdout = 0
    # A record whose gold answer (answer_field, or tests_field) is absent or null, where the
    # verifier reads one (docs/your-task.md, "Gold answers"): "error" stops the load naming
    # the record and the field; "skip" leaves such records out and logs how many.
    on_missing_gold: Literal["error", "skip"] = "error"


# Built-in verifiers that score without a gold answer (a record's answer, when it has one, still
# travels as params.gold). Every other built-in reads one: math, exact, code, rlpr, hybrid ...
SCORES_WITHOUT_GOLD = frozenset({"arith_steps", "env", "format", "llm_judge", "math_steps", "random"})


def reads_gold(cfg: RecordDataset, *, verl: bool) -> bool:
    """Whether every record must carry a gold answer for ``cfg``'s verifier.

    Read from the config alone (the learner never imports the verify role):
    a ``verifier_spec`` reads one when its params hold "{gold}" ("{tests}" with
    ``tests_field``); ``tests_field`` is the code verifier's input; a plug-in
    (``"module:ATTR"``) reads one only if its function declares it, which only
    the verify role can see, so it needs one when the answer field is named
    (``answer_field``, or verl's layout, whose ``ground_truth`` verl scorers
    take) and otherwise gets the answer when the record has it; a built-in
    needs one unless it is in ``SCORES_WITHOUT_GOLD``.
    """
    if cfg.verifier_spec is not None:
        return _mentions(cfg.verifier_spec.params, "{tests}" if cfg.tests_field else "{gold}")
    if cfg.tests_field:
        return True
    if ":" in cfg.verifier:
        return cfg.answer_field is not None or verl
    return cfg.verifier not in SCORES_WITHOUT_GOLD


def _mentions(value: Any, slot: str) -> bool:
    if isinstance(value, dict):
        return any(_mentions(v, slot) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_mentions(v, slot) for v in value)
    return value == slot


class ArithmeticDataset(PromptStyle, frozen=True, forbid_unknown_fields=True, tag="arithmetic", tag_field="kind"):
    """Built-in: generated integer arithmetic ("12+7="), verifiable by exact match."""

    # Operators drawn uniformly.
    ops: tuple[Literal["+", "-", "*"], ...] = ("+", "-")
    # Operands are uniform in [0, max_operand].
    max_operand: Annotated[int, Meta(ge=1)] = 99
    # Operands per problem: 2 ("12+34="), or a chain of 3-4 computed left to right ("12+34-56=").
    terms: Annotated[int, Meta(ge=2, le=4)] = 2
    # A chain's warm-up answer shows its steps as running totals ("12+34=46-56=-10", what the
    # arith_steps verifier reads with chain = "running"); otherwise the answer alone.
    show_steps: bool = False
    # Problems drawn for a chain (terms > 2), whose space is too large to enumerate.
    chain_problems: Annotated[int, Meta(ge=1)] = 50_000
    # Problems held out for evaluation, removed from training by exact match.
    holdout: Holdout = 500
    # Write operands with leading zeros ("07+45="), so every prompt has the
    # same length and each digit the same position: a tiny model learns
    # column arithmetic much faster (the experiment in docs/design.md left-padded).
    pad_operands: bool = True
    # Verifier that scores the answers; "{gold}" in its params becomes the answer.
    verifier: VerifierSpec = VerifierSpec(name="exact", params={"gold": "{gold}"})
    # The user message of prompt_style "chat": "{a}", "{op}" and "{b}" are replaced
    # (op as +, - or \times; operands then without padding).
    question: str = "What is {a} {op} {b}? Put the final answer in \\boxed{}."


class JsonlDataset(RecordDataset, frozen=True, forbid_unknown_fields=True, kw_only=True, tag="jsonl", tag_field="kind"):
    """A local JSONL (gzipped if it ends in .gz), JSON array or Parquet file of records."""

    # The file.
    path: str


class HFDataset(RecordDataset, frozen=True, forbid_unknown_fields=True, kw_only=True, tag="hf", tag_field="kind"):
    """A Hugging Face ``datasets`` dataset, from local files only (nothing is downloaded)."""

    # A folder written by Dataset.save_to_disk / DatasetDict.save_to_disk, or local
    # data files: one .parquet / .jsonl / .json / .arrow file, or a glob of them.
    path: str
    # The split to train on (a DatasetDict's key; data files are read as "train").
    split: str = "train"
    # A split to evaluate on instead of a held-out share of `split` ("" = use `holdout`).
    heldout_split: str = ""


class BuiltinDataset(PromptStyle, frozen=True, forbid_unknown_fields=True, kw_only=True, tag="builtin",
                     tag_field="kind"):
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
    holdout: Holdout = 0
    # Override the adapter's verifier (math for GSM8K/MATH, code for MBPP/HumanEval),
    # e.g. with a composite adding a format reward and overlong shaping;
    # "{gold}" / "{tests}" in its params are replaced per record.
    verifier: VerifierSpec | None = None


class ReasoningGymTask(Struct, frozen=True, forbid_unknown_fields=True):
    # A reasoning-gym task name (reasoning_gym.factory.DATASETS), e.g. "chain_sum".
    name: str
    # Its share of the mix (relative; need not sum to 1).
    weight: Annotated[float, Meta(gt=0)] = 1.0
    # The task's own config (its config dataclass's fields, e.g. {max_terms = 3}); seed and
    # size are set by the dataset.
    config: dict[str, Any] = {}
    # Curriculum levels to draw from, each the task's reasoning_gym curriculum at that
    # global level (its config then overrides); a task's level becomes Task.level
    # (for curriculum = "by_level"). Empty: no curriculum, `config` alone.
    levels: list[Annotated[int, Meta(ge=0)]] = []


class ReasoningGymDataset(
    PromptStyle, frozen=True, forbid_unknown_fields=True, kw_only=True, tag="reasoning_gym", tag_field="kind"
):
    """Procedural tasks from reasoning-gym (``pip install 'rlvr-actor[gym]'``), scored by their own ``score_answer``."""

    # The tasks and their weights.
    tasks: Annotated[list[ReasoningGymTask], Meta(min_length=1)]
    # Training problems drawn from the mix.
    size: Annotated[int, Meta(ge=1)] = 2000
    # Held-out problems, drawn apart and removed from training by exact match of the question.
    holdout: Holdout = 200
    # How the answer is found in a completion before score_answer sees it: the last
    # <answer>...</answer> (reasoning-gym's own extract_answer), the last \boxed{...}, or the
    # whole completion, stripped.
    answer_format: Literal["answer_tag", "boxed", "whole"] = "answer_tag"
    # Reward: score_answer's value as it is (partial credit), or 1 when it is 1 and 0 otherwise.
    binary: bool = False
    # reasoning-gym questions carry no answer-format instruction: "chat" with a system
    # prompt that asks for the answer_format is the default ("" in system_prompt: the
    # instruction for answer_format).
    prompt_style: Literal["bare", "chat"] = "chat"


class VerifiersDataset(PromptStyle, frozen=True, forbid_unknown_fields=True, kw_only=True, tag="verifiers",
                       tag_field="kind"):
    """The tasks of a ``verifiers`` environment, each an episode of it (``pip install 'rlvr-actor[env]'``)."""

    # The environment's id, as verifiers.load_environment takes it (an installed module, or one on sys.path).
    env_id: str
    # Keyword arguments of its load_environment().
    env_args: dict[str, Any] = {}
    # Held-out tasks: "eval_dataset" (the environment's own), or "holdout" (a share of its dataset).
    heldout: Literal["eval_dataset", "holdout"] = "holdout"
    # Records held out when heldout = "holdout".
    holdout: Holdout = 0
    # Assistant turns at most per episode.
    max_turns: Annotated[int, Meta(ge=1, le=256)] = 8
    # Tokens an episode may hold after its prompt.
    max_tokens: Annotated[int, Meta(ge=1)] = 4096
    # Built-in tools offered next to the environment ("python", "calculator"), sandboxed.
    tools: tuple[str, ...] = ()
    # The rows' prompts are chat messages already.
    prompt_style: Literal["bare", "chat"] = "chat"


DatasetConfig = ArithmeticDataset | JsonlDataset | HFDataset | BuiltinDataset | ReasoningGymDataset | VerifiersDataset

__all__ = [
    "ArithmeticDataset", "BuiltinDataset", "DatasetConfig", "HFDataset", "JsonlDataset", "PromptStyle",
    "ReasoningGymDataset", "ReasoningGymTask", "RecordDataset", "SCORES_WITHOUT_GOLD", "VerifiersDataset",
    "reads_gold",
]
