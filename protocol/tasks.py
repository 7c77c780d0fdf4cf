"""Task: one prompt the learner's feeder asks the rollout pool to answer ``n`` times.

Wire rules (see docs/design.md, "Messages"): structs are frozen and tagged; ``v`` is
the *major* schema version and only changes on an incompatible edit. A new
field always gets a default, so an older producer's message still decodes.
Unknown fields are ignored on the wire (never ``forbid_unknown_fields`` here),
so a newer producer's message decodes in an older consumer too.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

PositiveInt = Annotated[int, Meta(gt=0)]
NonNegativeInt = Annotated[int, Meta(ge=0)]


class ChatMessage(Struct, frozen=True, array_like=True):
    role: Literal["system", "user", "assistant"]
    content: str


class SamplingParams(Struct, frozen=True, omit_defaults=True):
    """Sampling parameters as every engine understands them.

    ``top_k = -1`` means no top-k cut. ``seed`` makes a group reproducible
    where the engine supports it.
    """

    # Softmax temperature of sampling; 0 = greedy. In [learn.sampling] it must equal
    # learn.engine.temperature (the learner recomputes log-probs at it).
    temperature: Annotated[float, Meta(ge=0.0)] = 1.0
    # Nucleus sampling: sample from the smallest set of tokens whose probability reaches top_p (1 = off).
    top_p: Annotated[float, Meta(gt=0.0, le=1.0)] = 1.0
    # Sample only from the k most likely tokens (-1 or 0 = off).
    top_k: int = -1
    # Most new tokens per completion (EOS included); a completion cut here finishes with "length".
    # vllm also caps it at max_model_len minus the prompt.
    max_tokens: PositiveInt = 256
    # Strings that end a completion: its text stops before the string, its ids keep the
    # token that completed it. EOS always stops.
    stop: tuple[str, ...] = ()
    # Makes a group reproducible (vllm: completion i uses seed + i; hf: reseeds torch);
    # unset = the engine's running random state.
    seed: int | None = None


class VerifierSpec(Struct, frozen=True, omit_defaults=True):
    """Which verifier scores this task, and its parameters.

    ``params`` stays a plain mapping on the wire on purpose: each verifier in
    ``rlvr.verify.registry`` converts it into its own typed parameter Struct,
    and a bad parameter becomes a dead letter that names it.
    """

    # A built-in verifier (exact, regex, format, composite, math, code) or
    # "package.module:ATTR" naming a module-level Verifier object.
    name: str
    # That verifier's parameters (e.g. gold, tests), converted to its typed params
    # struct; an unknown or ill-typed one dead-letters the task's samples.
    params: dict[str, Any] = {}


class EnvSpec(Struct, frozen=True, omit_defaults=True):
    """The environment a task is an episode of: a registered name and its parameters."""

    # A built-in environment ("tools", "openenv", "verifiers") or "package.module:ATTR"
    # naming an Environment class listed in [rollout] environments.
    name: str
    # That environment's parameters, converted to its typed Params struct.
    params: dict[str, Any] = {}
    # Assistant turns at most; the episode ends (max_turns) after the last.
    max_turns: Annotated[int, Meta(ge=1, le=256)] = 8
    # Tokens the whole episode may hold after the prompt (the model's and the
    # environment's); a turn gets at most what is left (token_budget).
    max_tokens: Annotated[int, Meta(ge=1)] = 4096


class Task(Struct, frozen=True, tag="task", omit_defaults=True):
    run: str
    task_id: str
    dataset: str
    index: NonNegativeInt
    prompt: str | list[ChatMessage]
    verifier: VerifierSpec
    n: PositiveInt
    sampling: SamplingParams
    policy_version: NonNegativeInt
    created_at: float
    # "eval" tasks measure pass@k on held-out data and never reach the optimizer.
    purpose: Literal["train", "eval"] = "train"
    # Free-form difficulty for curricula ("level 3", pass-rate bucket...).
    level: int | None = None
    v: int = 1
    # The dataset record's other fields (verl's data_source and extra_info, TRL's
    # keyword columns), for reward functions; the rollout copies it into each Sample.
    record: dict[str, Any] = {}
    # Set: each of the n samples is a multi-turn episode with this environment.
    env: EnvSpec | None = None


def task_subject_id(task: Task) -> str:
    """``Nats-Msg-Id`` of a task: stable, so a republished task is deduplicated."""
    return task.task_id


def task_meaning(task: Task) -> bytes:
    """What makes two copies of a task the same task: everything but when it
    was issued and the policy version current then (a feeder re-issuing a
    task after a restart changes only those)."""
    return msgspec.msgpack.encode(msgspec.structs.replace(task, created_at=0.0, policy_version=0))


__all__ = ["ChatMessage", "EnvSpec", "SamplingParams", "Task", "VerifierSpec", "task_meaning", "task_subject_id"]
