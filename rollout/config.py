"""Configuration of the rollout role (the ``[rollout]`` section)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

from rlvr.rollout.agents.config import AgentConfig
from rlvr.rollout.engines.base import GenerationEngineConfig, TrivialEngineConfig
from rlvr.sandbox.config import SandboxConfig


class RolloutCollectiveConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """Joining the learner's weight broadcast (learn.weights_transport = "nccl":
    rlvr.rollout.collective, docs/deploy.md "Weights by collective")."""

    # Join the broadcast. false: every "nccl" announcement is fetched by the fallback instead.
    join: bool = True
    # host:port of the learner's rendezvous ("" = the one the announcements name); set it to
    # join at start, before the first announcement.
    address: str = ""
    # "auto" = the backend the announcement names; "gloo" or "nccl" must match the learner's.
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    # Seconds one collective step may take (joining, one version's broadcast, a store call);
    # past it this replica leaves the group, falls back, and joins again.
    timeout_s: Annotated[float, Meta(gt=0)] = 60.0
    # torch device tensors are received on ("" = "cuda" for nccl, "cpu" for gloo).
    device: str = ""

    def __post_init__(self) -> None:
        if self.address:
            from rlvr.actors.collective import parse_address

            parse_address(self.address, "rollout.collective.address")


class RolloutConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # The generation engine: kind = "vllm" | "hf" | "trivial", plus its options.
    engine: GenerationEngineConfig = TrivialEngineConfig()
    # Tasks one replica works on at once (the engine batches them continuously).
    max_inflight_tasks: Annotated[int, Meta(ge=1)] = 8
    # Seconds between in_progress signals while a task is being generated
    # (at most a third of bus.ack_wait_s: a longer interval is tightened to that, with a warning).
    in_progress_every_s: Annotated[float, Meta(gt=0)] = 5.0
    # On a new policy: "between_steps" loads it when no generation is running
    # (in-flight groups finish on the old weights first); "abort_requeue" aborts
    # in-flight tasks, naks them for immediate redelivery, and loads at once.
    reload_policy: Literal["between_steps", "abort_requeue"] = "between_steps"
    # Local directory for fetched weight blobs ("" = a temporary directory).
    weights_cache_dir: str = ""
    # Weights broadcast by the learner (learn.weights_transport = "nccl").
    collective: RolloutCollectiveConfig = RolloutCollectiveConfig()
    # Multi-turn episodes (docs/environments.md): Environment classes tasks may name, as
    # "package.module:ATTR", imported once at start (never named by a message alone).
    environments: list[str] = []
    # Seconds an environment's constructor, reset(), step() or close() may take; past it
    # the episode ends as env_timeout (never a reward that looks like a wrong answer).
    env_timeout_s: Annotated[float, Meta(gt=0)] = 60.0
    # Seconds a tool call may take; past it the model is told it timed out.
    tool_timeout_s: Annotated[float, Meta(gt=0)] = 30.0
    # How the model writes tool calls: "hermes" (<tool_call>{json}</tool_call>: Qwen and
    # Hermes-style templates), "llama3" ({"name", "parameters"}), "plain" (name(argument)),
    # "ask" (a turn that is nothing but "=" calls the one tool offered: the built-in character model).
    tool_format: Literal["hermes", "llama3", "plain", "ask"] = "hermes"
    # A chat template that rewrites earlier turns (Qwen3 strips past <think> blocks):
    # "keep" the tokens the model saw (counted in Episode.template_rewrites), or "end" the episode.
    on_template_rewrite: Literal["keep", "end"] = "keep"
    # The sandbox of the built-in python tool: the same levels and limits as [verify.sandbox].
    sandbox: SandboxConfig = SandboxConfig()
    # An agent program this replica runs for every task without an env (docs/agents.md): each
    # of the task's n samples is an episode of it, on an OpenAI- and Anthropic-compatible endpoint
    # the replica serves. None: tasks are plain completions (or environment episodes).
    agent: AgentConfig | None = None
