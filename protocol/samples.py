"""Sample (one completion), Verdict (a verifier's judgement) and Scored (both).

Token payloads are ``array_like`` structs so a completion of a few thousand
tokens costs two msgpack arrays, not a map per token.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal, get_args

import msgspec
from msgspec import Meta, Struct

from rlvr.protocol.tasks import ChatMessage, SamplingParams, VerifierSpec

FinishReason = Literal["stop", "length", "abort", "rejected"]
# "error": the verifier itself failed (it raised, or returned no usable reward: NaN,
# a string...); like a timeout or a sandbox failure, never read as a wrong answer.
Outcome = Literal["ok", "wrong", "timeout", "sandbox_error", "parse_error", "error"]
OUTCOMES: tuple[str, ...] = get_args(Outcome)  # every outcome, in report order

# Token ids index an embedding: non-negative, and below 2**31 before the
# learner's own vocabulary check (torch's int64 would accept 2**63).
MAX_TOKEN_ID = 2**31 - 1
# A log-prob is <= 0; the small slack absorbs rounding in an engine's
# log-softmax. Below -1e4 a probability is 0 in any float type: such a
# value is a bug, and it would make an importance ratio overflow.
MAX_LOGPROB = 1e-3
MIN_LOGPROB = -1e4
# Checked by the decoder, in C, for every token of every consumed sample (NaN
# and +-inf fail too): per token, a Python check would cost more than the decode.
TokenId = Annotated[int, Meta(ge=0, le=MAX_TOKEN_ID)]
LogProb = Annotated[float, Meta(ge=MIN_LOGPROB, le=MAX_LOGPROB)]


class Completion(Struct, frozen=True, array_like=True, gc=False):
    """Token ids of the completion and the behaviour log-prob of each.

    ``logprobs[i]`` is log π_behaviour(ids[i] | prefix) under the engine's
    sampling distribution (after temperature / top-p), as the learner needs
    for truncated importance sampling. Appending fields is allowed; reordering
    is not (array_like).

    ``mask`` is the loss mask of a multi-turn episode: ``mask[i]`` is 1 where
    the policy generated ``ids[i]`` (trained on, ``logprobs[i]`` meaningful)
    and 0 where the environment or a tool wrote it (its log-prob is 0.0 and is
    never read). Empty: every token is the policy's, as in a single-turn sample.
    """

    ids: list[TokenId]
    logprobs: list[LogProb]
    mask: list[int] = []

    def policy_tokens(self) -> int:
        """How many of ``ids`` the policy generated."""
        return sum(self.mask) if self.mask else len(self.ids)


class Timings(Struct, frozen=True, omit_defaults=True):
    queued_s: float = 0.0  # task created -> picked up by a rollout replica
    generate_s: float = 0.0  # generation wall time for the whole group
    finished_at: float = 0.0  # unix time the sample was published


EndReason = Literal[
    "done", "max_turns", "token_budget", "env_error", "env_timeout", "template_rewrite", "aborted", "prompt_cap",
]
# Ends where the rollout cut the episode at a limit of its own, not the policy's or the environment's:
# the chat template rewrote an earlier turn (on_template_rewrite = "end"), or the conversation outgrew
# the engine's max_prompt_tokens (docs/environments.md). The learner drops them as ``episode_cut``.
CUT_ENDS: tuple[str, ...] = ("template_rewrite", "prompt_cap")
# Ends whose reward is not a real one: the environment, not the policy, failed (env_error,
# env_timeout), or the rollout cut the episode (CUT_ENDS). The verifier scores them outcome
# ``error``, never a 0 that reads as a wrong answer.
ENV_FAILURES: tuple[str, ...] = ("env_error", "env_timeout", *CUT_ENDS)


# Bytes of JSON of one turn's ``Episode.info`` at most: an environment's ``StepResult.info`` is kept for a
# person to read, and a hostile or careless one must not blow up every sample it is in.
MAX_INFO_BYTES = 4096


class Turn(Struct, frozen=True, array_like=True):
    """One assistant turn of an episode: its tokens ``completion.ids[start:end]``
    and the policy version that generated them."""

    start: int
    end: int
    policy_version: int


class Segment(Struct, frozen=True, array_like=True):
    """One more conversation of an episode, trained as a sequence of its own (an agent's episode).

    An agent (``rlvr.rollout.agents``) may edit, truncate or summarise its history, or run sub-agents
    with conversations of their own: its next request then does not extend the tokens recorded so far,
    and the rollout starts a new segment rather than splice two histories. The Sample's own
    ``prompt_ids`` and ``completion`` hold the segment of the episode's last model turn; every other
    segment is one of these, in the order they were started: its prompt ids, its completion (ids,
    behaviour log-probs, and the mask: 1 on the model's tokens, 0 on what the agent added) and its
    model turns (spans of ``completion.ids``). The learner trains each as its own sequence with the
    episode's advantage. Appending fields is allowed; reordering is not (array_like)."""

    prompt_ids: list[TokenId]
    completion: Completion
    turns: list[Turn]


class Episode(Struct, frozen=True, omit_defaults=True):
    """A multi-turn episode: the model's turns, what ended it, what the
    environment said (its rewards, per turn and final) and how its tools went.
    ``Sample.text`` is the last assistant turn (what verifiers read); the whole
    exchange is ``transcript``, as ``[role, content]`` pairs."""

    environment: str
    turns: list[Turn]
    end_reason: EndReason
    # The environment's reward at each step (0 where it gave none); their sum is env_reward.
    turn_rewards: list[float] = []
    env_reward: float = 0.0
    tool_calls: dict[str, int] = {}
    tool_errors: dict[str, int] = {}  # raised, timed out, garbage or unknown, by tool name
    env_s: float = 0.0  # seconds spent in the environment and its tools
    detail: str = ""  # why it ended, in words (an env_error's exception)
    transcript: list[list[str]] = []
    template_rewrites: int = 0  # turns whose chat template rewrote earlier turns (docs/environments.md)
    # What the environment's step returned as ``StepResult.info``, one dict per turn ({} where its step
    # gave none or did not run: a turn of tool calls); [] when no step gave any. Each is plain JSON,
    # at most MAX_INFO_BYTES of JSON (the rollout trims a larger one), for a person to read, never trained on.
    info: list[dict[str, Any]] = []
    # An agent's episode: its segments other than the Sample's own (``Segment``); [] for one conversation.
    segments: list[Segment] = []
    # An agent's episode (rlvr.rollout.agents): the Sample's ``prompt_ids`` are the rendered request of its
    # last segment, so the agent's, generated like the completion (``sample_meaning`` leaves them out).
    agent: bool = False

    @property
    def segment_count(self) -> int:
        """The episode's conversations trained as sequences: the Sample's own and ``segments``."""
        return 1 + len(self.segments)

    @property
    def turn_count(self) -> int:
        """The model's turns over the whole episode: the Sample's own segment's and every other segment's."""
        return len(self.turns) + sum(len(g.turns) for g in self.segments)


class Sample(Struct, frozen=True, tag="sample", omit_defaults=True):
    run: str
    task_id: str
    sample_index: Annotated[int, Meta(ge=0)]
    group_id: str
    group_size: Annotated[int, Meta(gt=0)]
    prompt_ids: list[TokenId]
    completion: Completion
    text: str
    finish_reason: FinishReason
    # Lowest and highest policy version the sample was generated under; they
    # differ when weights were reloaded while the sample was being generated.
    policy_version: Annotated[int, Meta(ge=0)]
    policy_version_max: Annotated[int, Meta(ge=0)]
    verifier: VerifierSpec
    sampling: SamplingParams
    replica: str
    purpose: Literal["train", "eval"] = "train"
    dataset: str = ""
    index: int = 0
    level: int | None = None
    timings: Timings = Timings()
    v: int = 1
    # The task's prompt and record, for reward functions that read them (TRL's
    # prompts and dataset columns, verl's data_source and extra_info).
    prompt: str | list[ChatMessage] | None = None
    record: dict[str, Any] = {}
    # A multi-turn episode's turns and outcome (None: one completion, one turn).
    episode: Episode | None = None
    # What the rollout measured of this completion with its own policy, by name: RLPR's
    # probability of the reference answer (rlpr_prob, rlpr_prob_base; rollout/rlpr.py).
    measures: dict[str, float] = {}

    @property
    def sample_id(self) -> str:
        """Stable id, also the ``Nats-Msg-Id`` of the sample (its Scored's is ``scored_msg_id``)."""
        return f"{self.task_id}/{self.sample_index}"


def sample_meaning(sample: Sample) -> bytes:
    """What makes two copies of a sample the same slot of the same task: every
    field the task fixed, none the generation produced (the completion, its
    text and finish reason, the policy versions, the replica, the timings, and
    a multi-turn episode's turns, an agent's prompt ids).

    A task is generated at least once: a rollout replica that dies (or whose
    nats-server dies) after publishing a group but before acking its task has
    the task generated again, and the new completions differ by sampling. Past
    a duplicate window the server lost (a SIGKILL forgets it for acked
    work-queue messages), those copies are stored under the same ids; the
    verifier serves the first copy of each slot and counts the rest as
    duplicates. A copy for another prompt, gold or verifier under the same id
    is still a conflict.
    """
    return msgspec.msgpack.encode(
        msgspec.structs.replace(
            sample,
            completion=Completion([], []),
            text="",
            finish_reason="stop",
            policy_version=0,
            policy_version_max=0,
            replica="",
            timings=Timings(),
            episode=None,  # an episode generated again takes other turns
            # An agent's prompt ids are what it sent (its history, compacted or not): generated. The task's
            # own prompt (``prompt``) stays in the meaning.
            prompt_ids=[] if sample.episode is not None and sample.episode.agent else sample.prompt_ids,
            measures={},  # measured on the generated completion
        )
    )


def scored_msg_id(sample: Sample, verdict: Verdict | None = None) -> str:
    """The ``Nats-Msg-Id`` of a sample's Scored: its id, a digest of its meaning and one of its
    verdict (``verdict_digest``; the verifier always passes it).

    Copies of one slot scored alike (a sample verified again, a group generated again) share
    it, so SCORED stores the first and drops the others inside the duplicate window. A sample
    published under the same id with other content (another prompt, gold or verifier), or the
    same sample scored with another verdict (two verifier replicas that took it in turn), gets
    another, so both reach the learner, which keeps one by content (the lower
    ``rlvr.learner.custody.custody.copy_rank``), whichever verifier replica scored each and
    whichever SCORED stored first (one replica alone cannot see a copy another replica took)."""
    digest = hashlib.blake2b(sample_meaning(sample), digest_size=8).hexdigest()
    if verdict is None:
        return f"{sample.sample_id}#{digest}"
    return f"{sample.sample_id}#{digest}.{verdict_digest(verdict).hex()}"


def verdict_digest(verdict: Verdict) -> bytes:
    """A digest of a verdict without what differs between two scorings of one thing (its
    ``latency_s``): equal for two verifiers that agree, different when they do not."""
    return hashlib.blake2b(msgspec.msgpack.encode(msgspec.structs.replace(verdict, latency_s=0.0)),
                           digest_size=8).digest()


class StepScore(Struct, frozen=True, array_like=True):
    """One step of a completion, as a step verifier judged it: the step is
    ``Sample.text[previous end:end]`` (character offsets), its reward, and
    whether it holds (``ok``: what CoT-pass@k counts)."""

    end: int
    reward: float
    ok: bool


class Verdict(Struct, frozen=True, omit_defaults=True):
    """A verifier's judgement. Outcomes are data: a timeout is ``timeout``,
    never a silent 0 that looks like a wrong answer."""

    reward: float
    outcome: Outcome
    verifier: str
    components: dict[str, float] = {}
    extracted: str | None = None
    latency_s: float = 0.0
    detail: str = ""
    # A step verifier's per-step scores (process rewards, learner/algos/process.py), in order.
    steps: list[StepScore] = []


class Scored(Struct, frozen=True, tag="scored", omit_defaults=True):
    sample: Sample
    verdict: Verdict
    replica: str = ""
    v: int = 1

    @property
    def sample_id(self) -> str:
        return self.sample.sample_id


__all__ = [
    "CUT_ENDS",
    "ENV_FAILURES",
    "MAX_INFO_BYTES",
    "OUTCOMES",
    "Completion",
    "EndReason",
    "Episode",
    "Turn",
    "FinishReason",
    "Outcome",
    "Sample",
    "Scored",
    "Segment",
    "StepScore",
    "Timings",
    "Verdict",
    "sample_meaning",
    "scored_msg_id",
    "verdict_digest",
]
