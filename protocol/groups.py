"""SampleGroup (one task's completions) and ScoredGroup (the same, with a verdict each): what ROLLOUTS
and SCORED carry, one message per task.

Why a group per message and not a sample: a group is what every role works on anyway (the rollout
generates a task's ``n`` completions at once, the learner needs the whole group before it can form an
advantage), and the cost of a hop is per message, not per byte: each message is a publish, a store,
a delivery, an ack and keep-alives on the server and in each client. One message per group cut the
verifiers' and nats-server's CPU per sample by about the group size (bench/vs_trl.py,
docs/benchmarks.md). What stays per sample: custody (each sample id has its fate in the learner's
ledger), validation (``check_sample`` on every member), and the samples' meaning and ranks.

- A ``SampleGroup`` holds every sample of the task, in ``sample_index`` order 0..n-1
  (``protocol/validate.py`` checks that: a group message is complete by construction). Its
  ``Nats-Msg-Id`` is ``<task_id>/group``: a group generated again inside the duplicate window is
  dropped by the server, past it the verifier's consumer recognises it by its meaning.
- A ``ScoredGroup`` holds the same samples and one ``Verdict`` per sample, in the same order. Its
  ``Nats-Msg-Id`` is ``<task_id>/group#<meaning>.<verdicts>`` (``scored_group_msg_id``): scored
  alike twice, it is stored once; scored otherwise (two verifier replicas that disagree), both reach
  the learner, which keeps one by the group's rank (``group_rank``), the same for every member.

A group too large for one message (over the server's ``max_payload``) travels by reference: its
samples go to the run's bodies bucket and the message carries a ``BodyRef`` instead
(actors/bodies.py, docs/design.md "Groups larger than a message").

Not here: what each role does with a group.
"""

from __future__ import annotations

import hashlib

import msgspec
from msgspec import Struct

from rlvr.protocol.samples import Sample, Scored, Verdict, sample_meaning, verdict_digest

MEANING_BYTES = 8  # the first bytes of a rank: two copies of one group (one task) share them


class BodyRef(Struct, frozen=True, array_like=True):
    """Where a group's samples are when they are too large for one message: an object in the run's
    bodies bucket (``RunNames.bodies_bucket``) named ``<task_id>/<sha256>``, holding the msgpack of a
    ``GroupBody``, ``size`` bytes. The reader takes the name only from the message's own task id and
    the digest, and checks the bytes against both (actors/bodies.py): a reference can name nothing
    but its own group's body."""

    name: str
    sha256: str
    size: int


class GroupBody(Struct, frozen=True, tag="group_body"):
    """A group's samples, stored apart from its message (``BodyRef``)."""

    samples: list[Sample]
    v: int = 1  # decoded by the codec as every wire type is: a newer major version is refused


def body_name(task_id: str, sha256: str) -> str:
    """The only name a group's body may have: its task id and the hex SHA-256 of its bytes."""
    return f"{task_id}/{sha256}"


class SampleGroup(Struct, frozen=True, tag="sample_group", omit_defaults=True):
    run: str
    task_id: str
    samples: list[Sample]  # empty when ``body`` holds them
    v: int = 1
    body: BodyRef | None = None  # a group too large for one message: its samples are in the bodies bucket

    @property
    def msg_id(self) -> str:
        return f"{self.task_id}/group"


class ScoredGroup(Struct, frozen=True, tag="scored_group", omit_defaults=True):
    run: str
    task_id: str
    samples: list[Sample]  # empty when ``body`` holds them
    verdicts: list[Verdict]  # verdicts[i] judges samples[i]
    replica: str = ""  # the verifier replica that scored the group
    v: int = 1
    body: BodyRef | None = None  # the same body its SampleGroup named: never copied

    def items(self) -> list[Scored]:
        """Each sample with its verdict, as the learner's custody and filters take them."""
        return [Scored(s, v, self.replica) for s, v in zip(self.samples, self.verdicts, strict=True)]


def group_meaning(samples: list[Sample]) -> bytes:
    """What makes two copies of a group the same task's group: every member's ``sample_meaning``
    (what the task fixed), none of what generation produced."""
    h = hashlib.blake2b(digest_size=MEANING_BYTES)
    for s in samples:
        h.update(hashlib.blake2b(sample_meaning(s), digest_size=16).digest())
    return h.digest()


def scored_group_msg_id(group: ScoredGroup) -> str:
    """``<task_id>/group#<meaning>.<verdicts>``: equal for two scorings that agree, different when
    any verdict differs (latency aside, ``verdict_digest``)."""
    h = hashlib.blake2b(digest_size=8)
    for v in group.verdicts:
        h.update(verdict_digest(v))
    return f"{group.task_id}/group#{group_meaning(group.samples).hex()}.{h.hexdigest()}"


def group_rank(group: ScoredGroup) -> bytes:
    """The rank of one copy of a scored group; the lower copy is kept (learner/custody/custody.py).
    The group's meaning first (``MEANING_BYTES``: two copies of one task share it), then a digest of
    every member and its verdict without what differs between two scorings of one thing (latency,
    the replica). Every member of a group takes this rank, so a conflict between two copies is
    decided the same way for all of them: a group is kept or put aside whole."""
    h = hashlib.blake2b(digest_size=16)
    for s, v in zip(group.samples, group.verdicts, strict=True):
        h.update(msgspec.msgpack.encode(s))
        h.update(msgspec.msgpack.encode(msgspec.structs.replace(v, latency_s=0.0)))
    return group_meaning(group.samples) + h.digest()


__all__ = ["BodyRef", "GroupBody", "SampleGroup", "ScoredGroup", "body_name", "group_meaning", "group_rank",
           "scored_group_msg_id"]
