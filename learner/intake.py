"""What a SCORED message must pass before custody takes its samples, and the bodies their fates free.

- A group whose samples travel by reference (``ScoredGroup.body``: too large for one message,
  actors/bodies.py) is read from the run's bodies bucket and validated as an inline group is. A
  reference to nothing, to another task's body or to other bytes is dead-lettered with the field
  (``Term``), its members never received; a bus fault is raised, and the consumer retries in place.
- Every token id must be inside the engine's vocabulary (``out_of_vocab``): on a GPU an id past it is
  a device-side assert that kills the process, and the sample would be replayed into it after every
  restart.

The bodies follow their samples' fate. The body each referenced message names is kept by the
message's stream seq; once a checkpoint commits a new ledger floor, every message below it is
settled and committed (trained, dropped or expired: final), and the bodies named only by such
messages are deleted (``committed``). A message dead-lettered here, or put aside as a conflict and
dead-lettered, keeps its body with its letter (``dead``): the bucket's TTL removes it with the letter.
This is memory of this process only: after a restart the messages from the floor on are delivered
again and named again; a body whose deletion a crash cut short waits for the TTL.

Not here: custody itself (learner/custody/), reading and writing bodies (actors/bodies.py).
"""

from __future__ import annotations

from rlvr.actors.bodies import BodyRefusedError, delete_bodies, resolve
from rlvr.actors.bus import Bus
from rlvr.actors.bus_faults import is_transient_bus_fault
from rlvr.actors.consume import Term
from rlvr.actors.logs import get_logger
from rlvr.protocol import ScoredGroup
from rlvr.protocol.validate import MessageInvalidError, check_token_ids_in_vocab

log = get_logger("rlvr.learner")


class ScoredIntake:
    def __init__(self, bus: Bus, vocab_size: int | None = None) -> None:
        self.bus = bus
        self.vocab_size = vocab_size  # the engine's; None for a dry learner (no embedding to protect)
        self.named: dict[int, str] = {}  # stream seq -> the body its message names, until it is below the floor
        self.kept: set[str] = set()  # bodies named by dead-lettered messages: they stay with the letters

    async def admit(self, group: ScoredGroup, seq: int) -> ScoredGroup | Term:
        """``group`` with its samples (read and validated when they travel by reference), or the ``Term``
        that dead-letters it."""
        if group.body is None:
            return group
        try:
            resolved = await resolve(self.bus, group)
        except (BodyRefusedError, MessageInvalidError) as e:
            return Term(e.reason, type(e).__name__, kind="invalid")
        self.named[seq] = group.body.name
        return resolved  # type: ignore[return-value]

    def dead(self, seq: int) -> None:
        """The message at ``seq`` is dead-lettered: the body it names stays, readable with the letter."""
        name = self.named.pop(seq, None)
        if name is not None:
            self.kept.add(name)

    async def committed(self, floor: int) -> None:
        """A checkpoint committed ``floor``: delete the bodies only messages below it name. A failed
        deletion is logged and left to the bucket's TTL: the checkpoint stands either way."""
        freed = {self.named.pop(seq) for seq in [s for s in self.named if s < floor]}
        freed -= set(self.named.values()) | self.kept  # another copy above the floor, or a letter, still names it
        if not freed:
            return
        try:
            await delete_bodies(self.bus, sorted(freed))
        except Exception as e:
            if not is_transient_bus_fault(e):
                raise
            log.warning("bodies_not_deleted", count=len(freed), error=f"{type(e).__name__}: {e}",
                        note="left to the bodies bucket's TTL")


    def out_of_vocab(self, group: ScoredGroup) -> Term | None:
        """A Term for a group with token ids the engine's vocabulary does not hold, checked before a
        sample can reach the embedding (custody still sees it: it may be a copy of one held)."""
        if self.vocab_size is None:
            return None
        for i, sc in enumerate(group.items()):
            try:
                check_token_ids_in_vocab(sc, self.vocab_size)
            except MessageInvalidError as e:  # named as the consumer's validation names a member
                return Term(f"samples[{i}].{e.reason}", error_type="MessageInvalidError", kind="invalid")
        return None


__all__ = ["ScoredIntake"]
