"""Wire protocol of rlvr-actor: message types, subjects, streams, codec.

This package is the contract between the three roles. It imports msgspec and
the standard library only: no torch, no vLLM, no sympy, no nats. The stream
and consumer *definitions* live here as plain data; ``rlvr.actors.bus`` turns
them into JetStream calls.
"""

from rlvr.protocol.codec import (
    MessageDecodeError,
    UnsupportedVersionError,
    decode,
    encode,
)
from rlvr.protocol.control import Control, DeadLetter, Heartbeat
from rlvr.protocol.groups import SampleGroup, ScoredGroup
from rlvr.protocol.samples import (
    ENV_FAILURES, OUTCOMES, Completion, Episode, Sample, Scored, StepScore, Timings, Turn, Verdict,
)
from rlvr.protocol.subjects import RunNames, validate_run_id
from rlvr.protocol.tasks import ChatMessage, EnvSpec, SamplingParams, Task, VerifierSpec
from rlvr.protocol.validate import MessageInvalidError, check_message, check_token_ids_in_vocab
from rlvr.protocol.weights import WeightFile, WeightsAnnouncement

__all__ = [
    "ENV_FAILURES",
    "OUTCOMES",
    "ChatMessage",
    "Completion",
    "EnvSpec",
    "Episode",
    "Control",
    "DeadLetter",
    "Heartbeat",
    "MessageDecodeError",
    "MessageInvalidError",
    "RunNames",
    "Sample",
    "SampleGroup",
    "SamplingParams",
    "Scored",
    "ScoredGroup",
    "StepScore",
    "Task",
    "Timings",
    "Turn",
    "UnsupportedVersionError",
    "Verdict",
    "VerifierSpec",
    "WeightFile",
    "WeightsAnnouncement",
    "check_message",
    "check_token_ids_in_vocab",
    "decode",
    "encode",
    "validate_run_id",
]
