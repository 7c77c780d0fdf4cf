"""The whole-run config: one section per role plus the shared ones, read from TOML.

Entry layer only: the commands and ``roles`` import this module, because it
names every role's section.
Shared code (the runtime, the bus, consumers) takes only the pieces it needs
(run id, seed, ``NatsConfig``, ``BusConfig``) from ``rlvr.actors.config``.

Every struct forbids unknown keys, so a typo is an error that names the key
(``rlvr-actor`` prints ``config error in run.toml: Object contains unknown
field `lr` - at `$.learn```). The role sections are defined next to the role
that reads them (``rlvr.rollout.config``, ``rlvr.verify.config``,
``rlvr.learner.config``); this module only assembles them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

from rlvr.actors.config import (
    ConfigError, Seconds, SharedSections, convert_config, read_config,
)
from rlvr.cli.autoscale.policy import AutoscaleConfig
from rlvr.cli.stages.config import Stage, check_stages
from rlvr.learner.config import LearnConfig
from rlvr.rollout.config import RolloutConfig
from rlvr.rollout.engines.base import VLLMEngineConfig
from rlvr.verify.config import VerifyConfig


class UpConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # Where `rlvr-actor up` creates the run directory (<runs_dir>/<run>-<timestamp>).
    runs_dir: str = "runs"
    # Rollout replicas (child processes) to start; raise it when verifiers wait on generation.
    rollout_replicas: Annotated[int, Meta(ge=0)] = 1
    # Verifier replicas to start, each with verify.pool_size workers; raise it when scoring lags generation.
    verify_replicas: Annotated[int, Meta(ge=0)] = 2
    # Threads per child process (OMP_NUM_THREADS); 0 leaves the environment alone.
    threads_per_process: Annotated[int, Meta(ge=0)] = 1
    # Threads for the learner process alone (0 = threads_per_process). On 2 cores keep 1: the
    # rollout generates the next batch while the learner trains, and a second OpenMP thread
    # beside it made the steps 1.7-4x slower (bench/results/learner_threads.md).
    learner_threads: Annotated[int, Meta(ge=0)] = 0
    # With learner_threads set and more CPUs than it: the learner gets the last learner_threads
    # CPUs to itself, and every other process of the run (rollout, verifiers, nats-server) the
    # others (cli/cpus.py; docs/benchmarks.md, "The learner on a core of its own"). False: every
    # process may run on every CPU.
    pin_learner: bool = True
    # Seconds to wait for children to exit after Ctrl-C before killing them.
    stop_timeout_s: Seconds = 15.0
    # "live": one compact panel on a TTY; "plain": progress lines; "logs": child logs.
    display: Literal["auto", "live", "plain", "logs"] = "auto"


class Config(SharedSections, frozen=True, forbid_unknown_fields=True):
    # The rollout role: generation engine and how many tasks a replica works on.
    rollout: RolloutConfig = RolloutConfig()
    # The verifier role: worker pool, timeouts and the code sandbox.
    verify: VerifyConfig = VerifyConfig()
    # The learner role: dataset, group assembly and filtering, evaluation and the optimizer.
    learn: LearnConfig = LearnConfig()
    # `rlvr-actor up` only: run directory, replica counts and the display.
    up: UpConfig = UpConfig()
    # Verifier replicas that follow the backlog: under `up` when enabled, and
    # `rlvr-actor autoscale --role verify` (docs/autoscaling.md).
    autoscale: AutoscaleConfig = AutoscaleConfig()
    # `rlvr-actor up` only: stages run one after another, each from the previous one's weights
    # (kind = "sft" | "rl" | "rejection_sft", each with its own [learn] overrides: docs/recipes.md).
    # Empty: one RL run of [learn].
    stages: tuple[Stage, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_stages(self.learn, self.stages)
        # A LoRA learner publishes adapters only: a vLLM rollout must be started able to serve them.
        lora, engine = self.learn.engine.lora if self.learn.engine else None, self.rollout.engine
        if lora is not None and lora.enabled and isinstance(engine, VLLMEngineConfig):
            if engine.max_lora_rank is None or engine.max_lora_rank < lora.rank:
                raise msgspec.ValidationError(
                    f"learn.engine.lora.rank = {lora.rank} needs rollout.engine.max_lora_rank >= {lora.rank} "
                    f"(one of 8, 16, 32, 64...), got {engine.max_lora_rank} - at `$.rollout.engine.max_lora_rank`"
                )


def load_config(path: str | Path | None, *, overrides: dict | None = None) -> Config:
    """Read ``path`` (TOML) into a ``Config``; ``None`` gives the defaults.

    ``overrides`` are top-level keys set from the command line (``run``,
    ``nats.url``...), applied before validation so they are checked too.
    """
    raw, source = read_config(path, overrides)
    return convert_config(raw, Config, source)


def dump_config(cfg: Config) -> bytes:
    """The resolved config as JSON (``load_config`` reads it back)."""
    return msgspec.json.format(msgspec.json.encode(cfg), indent=2)


__all__ = ["Config", "ConfigError", "UpConfig", "dump_config", "load_config"]
