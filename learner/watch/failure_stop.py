"""Samples that keep failing: an alarm that quotes the failure, backoff, and the stop of a run that cannot learn.

A training sample *fails* when its verdict is no judgement of the policy
(``groups.judged`` is false): the verifier failed (``error``: a reward
function that raised, returned no number, or needs a column no record has;
``timeout``; ``sandbox_error``), the agent or environment failed
(``env_error``, ``env_timeout``), or the rollout cut the episode or refused
the prompt (``prompt_cap``, ``template_rewrite``, a prompt longer than the
engine's ``max_prompt_tokens``). One such sample says little. A run in which
every one fails cannot learn, and it used to go on at machine speed until
someone killed it (issue 44: 172,612 episodes of an agent that raised on its
first line, in 609 s, and only ``env_error=N`` on the screen).

``FailureWatch`` is fed every complete training group (``LearnActor``, where
``filter_group`` decides each sample's fate) and keeps the *streak*: the failed
samples since the last group that held a usable one (one usable sample shows
the pipeline works, so it ends the streak), when the first of them came, and
that first failure's exception line, whole (``exception_line``). From it:

- ``samples_failing``, an alarm (``alarms.Alarm``) raised once ``alarm_after``
  samples in a row failed, or one failed ``alarm_after_s`` ago with none usable
  since; its message names the source (the agent, environment or verifier, or
  the rollout's limit with its numbers), quotes the line and says how to fix
  it. It clears at the first usable sample;
- ``backoff_s``: how long the feeder waits before each task while the streak
  lasts, doubling with every failed group from ``backoff_initial_s`` up to
  ``backoff_max_s``, so failing tasks are not regenerated at machine speed;
- ``stop``: once ``stop_after`` samples in a row failed *and* the first of
  them is ``stop_after_s`` old, the run cannot learn: the learner commits its
  checkpoint and exits ``CANNOT_LEARN_EXIT``, with a ``CannotLearn`` saying what
  failed and how to fix it (summary and screen). Both bounds hold: the count
  keeps a slow run from stopping on a few failures, the time lets a long run
  ride out a short outage of its environment or sandbox.

Pure: the caller passes the time (monotonic seconds); no I/O here.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Annotated

from msgspec import Meta, Struct

from rlvr.learner.custody.groups import VERIFY_FAILED
from rlvr.learner.watch.alarm_edges import AlarmCleared, AlarmEdges
from rlvr.learner.watch.alarms import Alarm, Example
from rlvr.learner.watch.exception_line import exception_line
from rlvr.protocol import Scored
from rlvr.protocol.samples import CUT_ENDS, ENV_FAILURES

CANNOT_LEARN_EXIT = 4  # the learner stopped a run that cannot learn (a role: 1 crashed, 2 bad config, 3 no bus)
ALARM_KIND = "samples_failing"


class FailureConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # Raise the samples_failing alarm once this many training samples in a row failed...
    alarm_after: Annotated[int, Meta(ge=1)] = 8
    # ...or once one failed this many seconds ago with no usable sample since.
    alarm_after_s: Annotated[float, Meta(gt=0)] = 60.0
    # Stop the run (exit 4, checkpoint committed) once this many samples in a row failed (0 = never)...
    stop_after: Annotated[int, Meta(ge=0)] = 32
    # ...and the first of them failed at least this many seconds ago: an outage shorter than this
    # (an environment server restarting) is ridden out; a run that cannot learn stops within ~2 minutes.
    stop_after_s: Annotated[float, Meta(ge=0)] = 90.0
    # While samples keep failing the feeder waits this long before each task after the first failed
    # group, twice as long after each further one...
    backoff_initial_s: Annotated[float, Meta(ge=0)] = 0.25
    # ...up to this; a usable sample ends the wait.
    backoff_max_s: Annotated[float, Meta(ge=0)] = 2.0


class Failure(Struct, frozen=True):
    """One failed sample: what failed, where, its exception line (whole), and how to fix it."""

    kind: str  # the end reason (env_error, prompt_cap...), the verdict outcome (error, timeout...) or "rejected"
    source: str  # "agent 'calc'", "environment 'quiz'", "verifier 'my:fn'", "the rollout"
    line: str  # the exception line of its detail (``exception_line``), or the detail itself
    sample_id: str
    fix: str

    @property
    def cause(self) -> str:
        return f"{self.kind} from {self.source}"


class CannotLearn(Struct, frozen=True):
    """Why the run stopped: the summary's ``failure``, and the learner's last words."""

    what: str  # one sentence: how many samples failed, for how long, and the first one's source
    line: str  # the first failure's exception line, whole
    fix: str
    kind: str
    source: str
    samples: int  # failed in a row
    groups: int
    seconds: float  # from the first failure of the streak
    causes: dict[str, int]  # failed samples by "<kind> from <source>"
    sample_id: str  # the first failed sample

    def message(self) -> str:
        return f"{self.what}; the first: {self.line}. How to fix it: {self.fix}"


class RunCannotLearnError(RuntimeError):
    """Every recent training sample failed for long enough: the run stops (``CANNOT_LEARN_EXIT``)."""

    exit_code = CANNOT_LEARN_EXIT  # read by the role's host (cli/roles.py) for the process's exit code

    def __init__(self, stop: CannotLearn) -> None:
        super().__init__(stop.message())
        self.stop = stop


class _Streak:
    def __init__(self, first: Failure, at: float, example: Example) -> None:
        self.first = first
        self.first_at = at
        self.example = example
        self.samples = 0
        self.groups = 0
        self.causes: Counter[str] = Counter()


class FailureWatch:
    def __init__(self, cfg: FailureConfig | None = None, *, example_chars: int = 300) -> None:
        self.cfg = cfg or FailureConfig()
        self.example_chars = example_chars
        self.streak: _Streak | None = None
        # One alarm (keyed by its kind: its source may change), cleared at the first usable sample.
        self.edges = AlarmEdges(clear_after=1)

    @property
    def counts(self) -> Counter[str]:
        return self.edges.counts

    def group(self, members: list[Scored], now: float | None = None) -> list[Alarm]:
        """Take one complete training group; the alarms raised by it (new ones only)."""
        now = time.monotonic() if now is None else now
        failures = [(sc, f) for sc in members if (f := failure_of(sc)) is not None]
        if len(failures) < len(members):
            self.streak = None  # a usable sample: the pipeline works
        elif failures:
            if self.streak is None:
                sc, first = failures[0]
                self.streak = _Streak(first, now, Example(sc.sample_id, sc.sample.text[: self.example_chars],
                                                          sc.verdict.reward, sc.verdict.outcome,
                                                          sc.verdict.extracted, first.line))
            self.streak.samples += len(failures)
            self.streak.groups += 1
            self.streak.causes.update(f.cause for _, f in failures)
        return self.check(now)

    def check(self, now: float | None = None) -> list[Alarm]:
        """The alarm's condition now (also on a timer: ``alarm_after_s`` needs no new group); raised edges."""
        now = time.monotonic() if now is None else now
        s, cfg = self.streak, self.cfg
        current = {}
        if s is not None and (s.samples >= cfg.alarm_after or now - s.first_at >= cfg.alarm_after_s):
            current[ALARM_KIND] = self._alarm(s, now)
        return self.edges.update(current, now)

    def take_cleared(self) -> list[AlarmCleared]:
        return self.edges.take_cleared()

    def alerts(self) -> list[str]:
        return [a.message for a in self.edges.active.values()]

    def backoff_s(self) -> float:
        """The feeder's wait before each task now: 0 without a streak, else doubling per failed group."""
        s, cfg = self.streak, self.cfg
        if s is None or cfg.backoff_max_s <= 0:
            return 0.0
        return min(cfg.backoff_max_s, cfg.backoff_initial_s * 2.0 ** min(s.groups - 1, 30))

    def stop(self, now: float | None = None) -> CannotLearn | None:
        """Why the run must stop now, or None while it may still learn."""
        now = time.monotonic() if now is None else now
        s, cfg = self.streak, self.cfg
        if s is None or not cfg.stop_after or s.samples < cfg.stop_after or now - s.first_at < cfg.stop_after_s:
            return None
        what = (f"the run cannot learn: {s.samples} training samples in a row ({s.groups} groups, "
                f"{now - s.first_at:.0f} s) had no usable verdict ({_causes(s.causes)})")
        return CannotLearn(what, s.first.line, s.first.fix, s.first.kind, s.first.source, s.samples, s.groups,
                           round(now - s.first_at, 1), dict(s.causes), s.first.sample_id)

    def raise_if_cannot_learn(self, now: float | None = None) -> None:
        """``RunCannotLearnError`` with ``stop``'s reason when the run must stop now."""
        if (stop := self.stop(now)) is not None:
            raise RunCannotLearnError(stop)

    def _alarm(self, s: _Streak, now: float) -> Alarm:
        cfg = self.cfg
        stops = (f"the run stops once {cfg.stop_after} in a row have failed over {cfg.stop_after_s:g} s "
                 "(learn.failures)" if cfg.stop_after else "learn.failures.stop_after = 0: the run goes on")
        msg = (f"samples failing: the last {s.samples} training samples ({s.groups} groups, {now - s.first_at:.0f} s) "
               f"had no usable verdict ({_causes(s.causes)}). The first: {s.first.kind} from {s.first.source}: "
               f"{s.first.line}. How to fix it: {s.first.fix}. Tasks now wait {self.backoff_s():g} s each; {stops}")
        return Alarm(ALARM_KIND, "", msg, dict(s.causes), [s.example])


def failure_of(sc: Scored) -> Failure | None:
    """Why ``sc``'s verdict is no judgement of the policy (the negation of ``groups.judged``), or None."""
    s, v = sc.sample, sc.verdict
    e = s.episode
    if s.finish_reason == "rejected":
        return Failure("rejected", "the rollout", exception_line(v.detail) or "the prompt was rejected",
                       sc.sample_id, FIXES["rejected"])
    if e is not None and e.end_reason in ENV_FAILURES:
        who = "agent" if e.agent else "environment"
        source = f"the rollout ({who} {e.environment!r})" if e.end_reason in CUT_ENDS else f"{who} {e.environment!r}"
        fix = FIXES.get(f"{e.end_reason}/{who}") or FIXES[e.end_reason]
        return Failure(e.end_reason, source, exception_line(e.detail) or e.end_reason, sc.sample_id, fix)
    if v.outcome in VERIFY_FAILED:
        name = v.verifier or s.verifier.name
        return Failure(v.outcome, f"verifier {name!r}", exception_line(v.detail) or v.outcome, sc.sample_id,
                       FIXES[v.outcome])
    return None


# How to fix each kind of failure (by "<end reason>/<agent|environment>" first, then the kind alone).
FIXES = {
    "env_error/agent": "fix the agent (rollout.agent): the line above is what it raised or said; every failed "
                       "episode is in logs/rollout-*.log (agent_episode_ended)",
    "env_error": "fix the environment (rollout.environments): the line above is what it raised; every failed "
                 "episode is in logs/rollout-*.log (env_episode_ended)",
    "env_timeout/agent": "the agent runs past rollout.agent.timeout_s: make it finish, or raise the limit",
    "env_timeout": "the environment does not answer within rollout.env_timeout_s (a hung server or tool): fix it, "
                   "or raise the limit",
    "prompt_cap": "the conversation outgrows rollout.engine.max_prompt_tokens: raise it (within the model's "
                  "context), or shorten the prompts or the episode's max_tokens",
    "template_rewrite": "the chat template rewrites earlier turns and rollout.on_template_rewrite = \"end\" ends "
                        "the episode there: use a template that only appends (docs/environments.md), or \"keep\"",
    "rejected": "the prompts are longer than rollout.engine.max_prompt_tokens after the chat template: raise it "
                "(within the model's context), or shorten the prompts",
    "error": "the verifier fails on every sample (a reward function that raises or returns no number, or a "
             "column it needs that the dataset's records lack): score a few records with `rlvr-actor audit` "
             "and fix the function or the dataset",
    "timeout": "the verifier runs past verify.timeout_s: raise it, or make the verifier faster",
    "sandbox_error": "the verifier's sandbox fails (verify.sandbox): `rlvr-actor doctor` says why",
}

def _causes(causes: Counter[str]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in causes.most_common())


__all__ = ["CANNOT_LEARN_EXIT", "CannotLearn", "Failure", "FailureConfig", "FailureWatch", "RunCannotLearnError",
           "failure_of"]
