"""Configuration of the learner role (the ``[learn]`` section).

The feeder's datasets are tagged variants (``kind = "arithmetic"`` ...,
``rlvr.learner.data.dataset_config``); the
algorithm and DeepSpeed settings live in ``rlvr.learner.engine_config`` and
are attached here as ``[learn.engine]``. Without an engine section the learner
runs "dry": it feeds tasks, assembles and filters groups and reports reward
statistics, but trains nothing (the walking skeleton, and a cheap way to check
rollout and verifier pools before spending GPU hours).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

from rlvr.learner.data.dataset_config import (  # noqa: F401 (re-exported: the [learn.dataset] variants)
    ArithmeticDataset,
    BuiltinDataset,
    DatasetConfig,
    HFDataset,
    JsonlDataset,
    ReasoningGymDataset,
    VerifiersDataset,
)
from rlvr.learner.watch.alarms import AlarmConfig
from rlvr.learner.watch.failure_stop import FailureConfig
from rlvr.learner.engine_config import TrainEngineConfig
from rlvr.protocol.tasks import SamplingParams, VerifierSpec

PositiveInt = Annotated[int, Meta(ge=1)]


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
    # Completions of each round kept with their prompts and verdicts, to read what the model
    # wrote and how it was judged: <run_dir>/evals/<round>-<label>.jsonl (0 = none).
    keep_completions: Annotated[int, Meta(ge=0)] = 64
    # The summary's `time_to_gain`: the first round whose pass@1 is this much above
    # the "before" round's (0.20 = +20 points), with its step and seconds.
    gain_points: Annotated[float, Meta(gt=0, le=1)] = 0.20


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
    # Operators of the warm-up's problems (empty: the dataset's own).
    sft_ops: tuple[Literal["+", "-", "*"], ...] = ()
    # Share of warm-up problems written as a calculator episode instead of a direct answer:
    # the model asks ("="), the calculator answers ("82="), the model copies it. Non-zero
    # gives the model's tokenizer the episode chat template (examples/calculator.toml).
    tool_share: Annotated[float, Meta(ge=0, le=1)] = 0.0


class CollectiveConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """How the learner broadcasts weights by collective (``weights_transport = "nccl"``:
    rlvr.learner.weights.collective, docs/deploy.md "Weights by collective")."""

    # "nccl" (GPUs), "gloo" (CPUs), or "auto": nccl where CUDA is, gloo elsewhere.
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    # host:port of the learner's rendezvous store: it listens on the port, and replicas
    # connect to exactly this address (so a host they can reach, not 0.0.0.0).
    address: str = ""
    # Seconds any collective step may take (forming a group, one version's broadcast,
    # a store call); past it the replica is dropped from the collective and falls back.
    timeout_s: Annotated[float, Meta(gt=0)] = 60.0
    # How a replica gets a version its collective missed (failed, timed out, joined late):
    # "object_store": it asks, and the learner uploads its current version to the run's
    # bucket once and announces it; "path": the announcement names the export folder
    # (a filesystem every replica can read) and the replica reads it there.
    fallback: Literal["object_store", "path"] = "object_store"
    # torch device the learner stages tensors on for the broadcast ("" = "cuda" for nccl, "cpu" for gloo).
    device: str = ""


class WandbConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """The API key comes from the environment (WANDB_API_KEY, or `wandb login`), never from the config."""

    # The W&B project the run is logged to.
    project: str = "rlvr"
    # The team or user that owns the project ("" = the API key's default entity).
    entity: str = ""
    # "online" sends to the W&B server; "offline" only writes the run under `dir`
    # (upload it later with `wandb sync`).
    mode: Literal["online", "offline"] = "online"
    # Folder W&B writes its files under ("" = the run dir): <dir>/wandb/.
    dir: str = ""
    # Tags of the W&B run.
    tags: tuple[str, ...] = ()


class MlflowConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """A tracking server, a database or a local file store (MLflow 3 refuses a file store unless
    MLFLOW_ALLOW_FILE_STORE=true; a `file:` tracking_uri here sets it)."""

    # "http://host:5000", "sqlite:///mlflow.db" or "file:/path/mlruns" ("" = MLFLOW_TRACKING_URI,
    # or MLflow's own default). Credentials come from MLflow's environment variables, never from here.
    tracking_uri: str = ""
    # The experiment the run goes into (made when missing).
    experiment: str = "rlvr"


class TrackersConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """Each tracker is off until its table is set; one that fails is turned off, training goes on."""

    # Weights & Biases: step metrics, eval rounds, alarms, the config and sample tables.
    wandb: WandbConfig | None = None
    # MLflow: the same, as metrics, tags, params and artifacts.
    mlflow: MlflowConfig | None = None
    # A table of samples (prompt, completion, reward, outcome) every this many steps (0 = none).
    samples_every: Annotated[int, Meta(ge=0)] = 10
    # Samples in each table, spread over the step's groups.
    samples_per_table: PositiveInt = 8
    # Characters kept of each prompt and completion in a sample table.
    sample_chars: Annotated[int, Meta(ge=20)] = 2000


class SamplesConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """Each record holds a sample's tokens, loss mask, behaviour log-probs, episode, verdict and
    advantage; `rlvr-actor samples RUN_DIR` shows them."""

    # Write the trained samples of a step (false: write none).
    dump: bool = True
    # Write them every this many optimizer steps (1: every step).
    every_steps: PositiveInt = 1


class LearnConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # Where training and held-out prompts come from:
    # kind = "arithmetic" | "jsonl" | "hf" | "builtin" | "reasoning_gym" (docs/datasets.md).
    dataset: DatasetConfig = ArithmeticDataset()
    # The training tasks' verifier in place of the dataset's (the same form as learn.dataset.verifier);
    # held-out rounds keep the dataset's. The random-reward control: {name = "random", params = {p = 0.2}}.
    train_verifier: VerifierSpec | str | None = None
    # Train only on the prompts of this selection file (`rlvr-actor select`: one-shot RLVR), drawn
    # again and again to fill every step; held-out rounds are unchanged. "" trains on the whole split.
    train_subset: str = ""
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
    # Tasks outstanding at most (0 = groups_per_step * max(1, max_staleness)).
    max_inflight_tasks: Annotated[int, Meta(ge=0)] = 0
    # DAPO dynamic sampling: drop groups whose reward std is <= zero_variance_eps.
    dynamic_sampling: bool = True
    # Keep tasks in flight in proportion to the share of groups the filters keep (DAPO's remedy for
    # what dynamic sampling drops): max_inflight_tasks / kept share, at most 4x (learner/data/pacing.py).
    oversample: bool = False
    # Step with fewer kept groups than groups_per_step, at least this many, when no other complete
    # group is waiting (0: always a full batch). The loss is a token mean: a smaller step is noisier.
    min_groups_per_step: Annotated[int, Meta(ge=0)] = 0
    # With dynamic_sampling: true (DAPO's), a dropped group is replaced before the step, so every step
    # trains groups_per_step groups with signal and waits for them; false, a step takes the next
    # groups_per_step complete groups and trains the ones with signal: no wait, no forward or backward
    # on groups whose advantages are all 0 (learner/data/pacing.py).
    dynamic_sampling_refill: bool = True
    # Population std of a group's rewards at or below which dynamic sampling drops it.
    zero_variance_eps: Annotated[float, Meta(ge=0)] = 1e-6
    # A group not complete after this many seconds is dropped as "partial".
    group_timeout_s: Annotated[float, Meta(gt=0)] = 600.0
    # Publish weights every this many optimizer steps.
    sync_every: PositiveInt = 1
    # How weights reach the rollouts: "object_store" (the run's JetStream
    # bucket, any machine), "path" (a directory every replica can read:
    # the same machine or a shared filesystem; no copy through NATS), or "nccl":
    # a broadcast from the learner to each replica (gloo or NCCL: [learn.collective]).
    weights_transport: Literal["object_store", "path", "nccl"] = "object_store"
    # The collective broadcast of weights_transport = "nccl" (address required then).
    collective: CollectiveConfig | None = None
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
    # Alarms that say early when the reward carries no signal (flat rewards, a verifier that fails).
    alarms: AlarmConfig = AlarmConfig()
    # Training samples that fail in a row (no usable verdict: a failed verification, agent, environment, or a
    # prompt the rollout cut): the samples_failing alarm, the feeder's backoff, and the stop of a run that
    # cannot learn (exit 4, its checkpoint committed; docs/faults.md).
    failures: FailureConfig = FailureConfig()
    # Experiment trackers beside metrics.jsonl: W&B and MLflow (off by default; docs/tracking.md).
    trackers: TrackersConfig = TrackersConfig()
    # The trained samples, written for a person to read: `<out_dir>/samples/step-<N>.jsonl` (docs/samples.md).
    samples: SamplesConfig = SamplesConfig()
    # While no step comes, a progress line (groups scored and dropped, by reason) every this many seconds.
    progress_every_s: Annotated[float, Meta(gt=0)] = 15.0
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
        check_collective(self)
        if not self.dynamic_sampling_refill and (self.oversample or self.min_groups_per_step):
            key = "learn.oversample" if self.oversample else "learn.min_groups_per_step"
            raise ValueError(f"{key} paces refilled batches; with learn.dynamic_sampling_refill = false "
                             "no dropped group is refilled (remove one of the two)")
        if self.train_verifier is not None:
            train_dataset(self)  # the override fits this dataset kind's verifier, or the key is named
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


def check_collective(cfg: LearnConfig) -> None:
    """``weights_transport = "nccl"`` needs ``[learn.collective]`` with a usable address."""
    from rlvr.actors.collective import parse_address

    c = cfg.collective
    if cfg.weights_transport != "nccl":
        if c is not None:
            raise ValueError(f'learn.collective is set but learn.weights_transport = "{cfg.weights_transport}"; '
                             'set it to "nccl" or remove [learn.collective]')
        return
    if c is None or not c.address:
        raise ValueError('learn.weights_transport = "nccl" needs learn.collective.address (host:port replicas reach)')
    parse_address(c.address, "learn.collective.address")
    if c.backend == "gloo" and c.device.startswith("cuda"):
        raise ValueError(f'learn.collective.device = "{c.device}" with backend "gloo": gloo moves CPU tensors')
    if cfg.engine is not None and cfg.engine.lora.enabled:
        raise ValueError('learn.weights_transport = "nccl" with learn.engine.lora: adapters go by "object_store" '
                         'or "path" (they are small); the collective sends full weights only')


def train_dataset(cfg: LearnConfig) -> DatasetConfig:
    """The dataset the training tasks draw from: ``learn.dataset`` with ``learn.train_verifier`` in it."""
    if cfg.train_verifier is None:
        return cfg.dataset
    raw = msgspec.to_builtins(cfg.dataset)
    raw["verifier"] = msgspec.to_builtins(cfg.train_verifier)
    try:
        return msgspec.convert(raw, type(cfg.dataset))
    except msgspec.ValidationError as e:
        raise ValueError(f"learn.train_verifier does not fit a {raw.get('kind')} dataset: {e}") from None
