"""Configuration of the rollout role (the ``[rollout]`` section)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

from rlvr.rollout.engines.base import GenerationEngineConfig, TrivialEngineConfig


class RolloutConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # The generation engine: kind = "vllm" | "hf" | "trivial", plus its options.
    engine: GenerationEngineConfig = TrivialEngineConfig()
    # Tasks one replica works on at once (the engine batches them continuously).
    max_inflight_tasks: Annotated[int, Meta(ge=1)] = 8
    # Seconds between in_progress signals while a task is being generated.
    in_progress_every_s: Annotated[float, Meta(gt=0)] = 5.0
    # On a new policy: "between_steps" loads it when no generation is running
    # (in-flight groups finish on the old weights first); "abort_requeue" aborts
    # in-flight tasks, naks them for immediate redelivery, and loads at once.
    reload_policy: Literal["between_steps", "abort_requeue"] = "between_steps"
    # Local directory for fetched weight blobs ("" = a temporary directory).
    weights_cache_dir: str = ""
