"""Group assembly and the filters between the verifiers and the optimizer.

Scored samples arrive one by one in any order; ``GroupAssembler`` collects
them by ``group_id`` until ``group_size`` have arrived, then ``filter_group``
decides what reaches the optimizer. Every sample that does not is counted
under one reason, so "samples scored" always equals "samples trained" plus
the sum of the drop counters:

- ``duplicate``: the same sample id seen again (a redelivery); not a loss.
- ``stale``: ``current_version - sample.policy_version > max_staleness`` (an
  episode may be one version staler per turn after its first: ``episode_slack``).
- ``verify_failed``: the verifier timed out, its sandbox failed, or it failed
  itself (outcome ``error``: a reward function that raised or returned NaN);
  the reward is not a real one. The group's other samples are kept if at least
  two remain (their advantages are still meaningful), else dropped too.
- ``episode_cut``: the rollout cut the episode at a limit of its own
  (``CUT_ENDS``: the chat template rewrote a turn and ``on_template_rewrite``
  is ``end``, or the conversation outgrew the engine's ``max_prompt_tokens``):
  its reward says nothing of the policy, whatever the verifier gave it.
- ``rejected``: the rollout rejected the prompt (too long).
- ``invalid``: a value no step may use: a NaN or infinite reward, reward
  component or log-prob, ids out of range, lengths that disagree, or a
  ``group_size`` other than its group's (``rlvr.protocol.validate``). The
  consume loop already dead-letters such messages; this second check runs
  where the numbers are used, so a sample that got past the first (replayed
  from before it existed, or built in-process) can never crash-loop the
  learner (``statistics.pstdev`` raises on NaN) or reach the weights.
- ``malformed``: no tokens, or not one behaviour log-prob per token.
- ``zero_variance``: DAPO dynamic sampling; all rewards in the group equal (and, with
  process rewards, all step rewards too).
- ``partial``: the group did not complete within ``group_timeout_s`` of stream
  time (``StreamClock``): the time its first member was stored on SCORED,
  not when this process first saw it, so a learner that restarts more often
  than the timeout still expires a group that can never complete (one cut by a
  retention gap), and a learner replaying an hour of SCORED does not expire
  a group whose members were stored seconds apart.

This module is pure: no NATS, no torch.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter

import msgspec

from rlvr.protocol import Scored
from rlvr.protocol.samples import CUT_ENDS, ENV_FAILURES
from rlvr.protocol.validate import MessageInvalidError, check_scored

# Verdict outcomes whose reward is not a real one: never trained on.
VERIFY_FAILED = ("timeout", "sandbox_error", "error")
DROP_REASONS = (
    "stale", "verify_failed", "episode_cut", "rejected", "malformed", "invalid", "zero_variance", "partial", "duplicate",
)


class Group(msgspec.Struct):
    group_id: str
    size: int
    members: list[tuple[int, Scored]]  # (stream sequence, scored sample)
    first_seen: float  # stream time (StreamClock) of its first member's storage

    @property
    def purpose(self) -> str:
        return self.members[0][1].sample.purpose


class FilterResult(msgspec.Struct):
    kept: list[tuple[int, Scored]]
    dropped: list[tuple[int, Scored, str]]  # (seq, sample, reason)
    # The group's usable rewards (two or more) were all equal: no signal for GRPO, whether dynamic
    # sampling dropped the group for it or (turned off) let it train. The run's zero-variance share.
    flat: bool = False


class StreamClock:
    """The time of the stream as this learner has read it: the storage time of
    the newest SCORED message delivered, running on with this process's
    monotonic clock between deliveries (so it also moves while nothing comes).

    Group timeouts are measured on it. After a restart a replayed group's age is
    its age on the stream, and a replay that reads an hour of messages in a
    minute moves the clock by the hour, in step with the messages it delivers:
    a group whose members were stored close together is completed, not expired.
    The server's timestamps and this process's clock are never compared, so
    clock skew between machines does not matter."""

    def __init__(self, mono=time.monotonic) -> None:
        self._mono = mono
        self._at: float | None = None  # stream time at ``_since``
        self._since = 0.0

    def now(self) -> float:
        t = self._mono()
        if self._at is None:
            return t  # nothing delivered yet: groups fall back to this process's clock
        return self._at + (t - self._since)

    def saw(self, stored_at: float | None) -> float:
        """A message stored at ``stored_at`` (unix seconds, the server's) was delivered; the clock's time."""
        if stored_at is None:
            return self.now()
        t = self._mono()
        self._at = stored_at if self._at is None else max(self._at + (t - self._since), stored_at)
        self._since = t
        return self._at


class GroupAssembler:
    def __init__(self, group_timeout_s: float, clock: StreamClock | None = None) -> None:
        self.group_timeout_s = group_timeout_s
        self.clock = clock or StreamClock()
        self.open: dict[str, Group] = {}
        self.seen: set[str] = set()
        self.duplicates = 0

    def add(self, seq: int, scored: Scored, now: float | None = None) -> Group | None:
        """Add one sample (``now``: its stream time; default the clock's); return its group
        when this sample completes it."""
        sid = scored.sample_id
        if sid in self.seen:
            self.duplicates += 1
            return None
        self.seen.add(sid)
        s = scored.sample
        group = self.open.get(s.group_id)
        if group is None:
            group = self.open[s.group_id] = Group(
                s.group_id, s.group_size, [], self.clock.now() if now is None else now)
        group.members.append((seq, scored))
        if len(group.members) >= group.size:
            del self.open[s.group_id]
            # A closed group's ids are the ledger's to recognise from now on
            # (pending, then settled): this set only spans open groups.
            self.seen.difference_update(sc.sample_id for _, sc in group.members)
            group.members.sort(key=lambda m: m[1].sample.sample_index)
            return group
        return None

    def replace(self, seq: int, scored: Scored) -> int | None:
        """Put ``scored`` (at ``seq``) in the place of the member with its sample id, if that member's
        group is still open; return the stream seq of the member it replaced (None: no open group
        holds that id, the copy changes nothing). Custody decides which copy of a conflict to keep."""
        group = self.open.get(scored.sample.group_id)
        for i, (old_seq, member) in enumerate(group.members if group is not None else []):
            if member.sample_id == scored.sample_id:
                group.members[i] = (seq, scored)
                return old_seq
        return None

    def expire(self, now: float | None = None) -> list[Group]:
        """Groups open longer than the timeout in stream time, removed and returned (drop them as partial)."""
        now = self.clock.now() if now is None else now
        expired = [g for g in self.open.values() if now - g.first_seen > self.group_timeout_s]
        for g in expired:
            del self.open[g.group_id]
            self.seen.difference_update(sc.sample_id for _, sc in g.members)
        return expired


def filter_group(
    group: Group,
    *,
    current_version: int,
    max_staleness: int,
    dynamic_sampling: bool,
    zero_variance_eps: float,
    process: str = "off",
) -> FilterResult:
    kept: list[tuple[int, Scored]] = []
    dropped: list[tuple[int, Scored, str]] = []
    for seq, sc in group.members:
        comp = sc.sample.completion
        if invalid_reason(sc, group.size) is not None:
            dropped.append((seq, sc, "invalid"))
        elif sc.sample.finish_reason == "rejected":
            dropped.append((seq, sc, "rejected"))
        elif sc.sample.episode is not None and sc.sample.episode.end_reason in CUT_ENDS:
            dropped.append((seq, sc, "episode_cut"))
        elif sc.verdict.outcome in VERIFY_FAILED:
            # Before ``malformed``: an agent that failed before its first request has no tokens, and
            # what went wrong is the failure its verdict records, not the message.
            dropped.append((seq, sc, "verify_failed"))
        elif not comp.ids or len(comp.ids) != len(comp.logprobs) or not sc.sample.prompt_ids:
            dropped.append((seq, sc, "malformed"))
        elif current_version - sc.sample.policy_version > max_staleness + episode_slack(sc):
            dropped.append((seq, sc, "stale"))
        else:
            kept.append((seq, sc))
    if len(kept) < 2:
        # Other drops left fewer than two samples: no advantage can be formed.
        dropped += [(seq, sc, "partial") for seq, sc in kept]
        return FilterResult([], dropped)
    rewards = [sc.verdict.reward for _, sc in kept]
    flat = statistics.pstdev(rewards) <= zero_variance_eps and not _steps_vary(
        [sc for _, sc in kept], process, zero_variance_eps)
    if dynamic_sampling and flat:
        dropped += [(seq, sc, "zero_variance") for seq, sc in kept]
        return FilterResult([], dropped, flat=True)
    return FilterResult(kept, dropped, flat=flat)


def _steps_vary(group: list[Scored], process: str, eps: float) -> bool:
    """With process rewards, a group whose outcomes are all equal still carries signal when
    its step rewards (a step verifier's, or an episode's per turn) differ."""
    if process == "steps":
        flat = [st.reward for sc in group for st in sc.verdict.steps]
    elif process == "turns":
        flat = [r for sc in group if sc.sample.episode is not None for r in sc.sample.episode.turn_rewards]
    else:
        return False
    return len(flat) > 1 and statistics.pstdev(flat) > eps


def judged(sc: Scored) -> bool:
    """True when ``sc``'s verdict is a real judgement of the policy: the rollout did not reject
    the prompt, the verifier did not fail (``VERIFY_FAILED``), and the episode, if any, was neither
    failed by its environment nor cut by the rollout (``ENV_FAILURES``). Only these count in pass
    rates, the prompt history and the curriculum."""
    e = sc.sample.episode
    return (sc.sample.finish_reason != "rejected" and sc.verdict.outcome not in VERIFY_FAILED
            and (e is None or e.end_reason not in ENV_FAILURES))


def episode_slack(sc: Scored) -> int:
    """Extra versions of staleness an episode may have: one per turn after its first (an agent's
    turns in all its segments).

    An episode's staleness counts from its first turn (``policy_version`` is the
    version that turn was generated under), and the policy moves on while the
    environment answers; a filter meant for single completions would starve
    every long episode (docs/environments.md, "Staleness")."""
    e = sc.sample.episode
    return 0 if e is None else max(0, len(e.turns) + sum(len(g.turns) for g in e.segments) - 1)


def invalid_reason(sc: Scored, group_size: int) -> str | None:
    """Why ``sc`` can never be trained on, or None when its values are usable."""
    if sc.sample.group_size != group_size:
        return f"group_size {sc.sample.group_size} differs from its group's {group_size}"
    try:
        check_scored(sc)
    except MessageInvalidError as e:
        return e.reason
    return None


class DropCounter:
    """Samples and groups dropped, by reason."""

    def __init__(self) -> None:
        self.samples: Counter[str] = Counter()
        self.groups: Counter[str] = Counter()

    def count(self, result: FilterResult) -> None:
        reasons = Counter(reason for _, _, reason in result.dropped)
        self.samples.update(reasons)
        if not result.kept and reasons:
            self.groups[reasons.most_common(1)[0][0]] += 1

    def as_dict(self) -> dict[str, int]:
        return {f"drop_{k}": v for k, v in sorted(self.samples.items())}
