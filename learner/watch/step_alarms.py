"""The stage-1 alarms: what to watch in a run's first steps, computed from its step records.

``SignalWatch`` (``alarms.py``) watches the reward; ``StepWatch`` watches
the policy, one ``StepRecord.flat()`` at a time:

- ``kl_high``: the KL to the reference (``kl``, when a reference model is
  kept) above ``kl_max``, or grown ``kl_jump`` times within
  ``kl_jump_steps`` steps (from at least ``kl_floor``);
- ``entropy_collapse``: the policy's entropy below ``entropy_min``, or below
  ``entropy_drop`` x its mean over the first ``baseline_steps`` steps;
- ``language_mixing``: the share of letters outside ``scripts`` (Unicode
  scripts by the first word of a letter's name: LATIN, CJK, CYRILLIC,
  GREEK, ARABIC, HANGUL, HIRAGANA, KATAKANA, DEVANAGARI...; a Chinese and
  English task lists both) above ``foreign_share_max``, over the last
  ``window_steps`` steps (``foreign_script_share``, learner/watch/metrics.py);
- ``length_at_cap``: at least ``clip_share_max`` of completions cut by
  ``max_tokens`` over the last ``window_steps`` steps;
- ``invalid_batches``: the share of samples dropped (zero variance, stale,
  partial) rather than trained, over the last ``window_steps`` steps, at
  least ``invalid_share_max``, or risen by ``invalid_rise`` above its first
  window's;
- ``length_collapse``: the mean completion length over the last
  ``window_steps`` steps below ``length_drop`` x its first steps' (the
  random-reward control on the built-in example ended in empty answers);
- ``eval_regression``: a held-out round's pass@1 ``eval_drop`` or more below
  the round before RL (``eval_round``).

An alarm is raised once when it starts to hold (logged, written to
``metrics.jsonl``, shown by ``up``, carried in the heartbeat's alerts) and
counted in ``counts``, which the summary reports with how long each held. It
clears once its condition has been false for ``clear_after_steps`` steps in a
row (``eval_regression``: at the next round that is not below), and says so
once (``take_cleared``; ``alarm_edges.py``). Pure: records in, alarms out.
"""

from __future__ import annotations

import functools
import statistics
import time
import unicodedata
from collections import Counter, deque
from typing import Annotated

from msgspec import Meta, Struct

from rlvr.learner.watch.alarm_edges import AlarmCleared, AlarmEdges


_DROPS = ("drop_zero_variance", "drop_stale", "drop_partial")


class StepAlarmConfig(Struct, frozen=True, forbid_unknown_fields=True):
    # KL to the reference above this (a run with a reference model) ...
    kl_max: Annotated[float, Meta(gt=0)] = 1.0
    # ... or grown this many times within kl_jump_steps steps, from at least kl_floor.
    kl_jump: Annotated[float, Meta(gt=1)] = 10.0
    # The steps a KL jump is measured over.
    kl_jump_steps: Annotated[int, Meta(ge=1)] = 5
    # A KL below this never counts as the start of a jump (noise around 0).
    kl_floor: Annotated[float, Meta(ge=0)] = 1e-3
    # Entropy below this, ...
    entropy_min: Annotated[float, Meta(ge=0)] = 0.02
    # ... or below this share of its mean over the first baseline_steps steps.
    entropy_drop: Annotated[float, Meta(gt=0, lt=1)] = 0.1
    # The first steps the entropy and length alarms compare with.
    baseline_steps: Annotated[int, Meta(ge=1)] = 10
    # The Unicode scripts completions are expected in (first word of a letter's Unicode name).
    scripts: tuple[str, ...] = ("LATIN",)
    # Share of letters outside `scripts` above this (mean of the last window_steps steps).
    foreign_share_max: Annotated[float, Meta(ge=0, le=1)] = 0.05
    # Share of completions cut at max_tokens at or above this (mean of the last window_steps steps).
    clip_share_max: Annotated[float, Meta(gt=0, le=1)] = 0.5
    # Mean completion length (last window_steps steps) below this share of its first baseline_steps'.
    length_drop: Annotated[float, Meta(gt=0, lt=1)] = 0.6
    # A held-out round whose pass@1 is this far (absolute) below the round before RL.
    eval_drop: Annotated[float, Meta(gt=0, le=1)] = 0.05
    # Share of samples dropped instead of trained at or above this (last window_steps steps) ...
    invalid_share_max: Annotated[float, Meta(gt=0, le=1)] = 0.9
    # ... or risen by this much above its first window.
    invalid_rise: Annotated[float, Meta(gt=0, le=1)] = 0.3
    # Steps averaged by the windowed alarms.
    window_steps: Annotated[int, Meta(ge=1)] = 10
    # Steps in a row an alarm's condition must be false before it clears (one bad step
    # in a good stretch, or one good step in a bad one, changes nothing).
    clear_after_steps: Annotated[int, Meta(ge=1)] = 3


@functools.lru_cache(maxsize=1 << 16)
def script_of(ch: str) -> str | None:
    """The script of a letter (the first word of its Unicode name), None for anything else. Cached:
    a text has few distinct characters, and the name lookup costs ~300 ns."""
    if not unicodedata.category(ch).startswith("L"):
        return None
    name = unicodedata.name(ch, "")
    return name.split(" ", 1)[0] if name else None


def foreign_script_share(texts: list[str], scripts: tuple[str, ...]) -> float:
    """Letters outside ``scripts`` over all letters of ``texts`` (0 when there are none).

    Counted per distinct character (``Counter`` counts in C), then each distinct one looked up once:
    it runs on the learner's event loop every step, and a per-character lookup cost 2.7-3.8 CPU s on
    a step of 512 samples of ~2k tokens (bench/scale/step_cost.py)."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(text)
    letters = foreign = 0
    for ch, n in counts.items():
        s = script_of(ch)
        if s is not None:
            letters += n
            foreign += n if s not in scripts else 0
    return foreign / letters if letters else 0.0


class StepWatch:
    def __init__(self, cfg: StepAlarmConfig | None = None) -> None:
        self.cfg = cfg or StepAlarmConfig()
        w = self.cfg.window_steps
        self._kl: deque[float] = deque(maxlen=self.cfg.kl_jump_steps + 1)
        self._entropy_base: list[float] = []
        self._foreign: deque[float] = deque(maxlen=w)
        self._clip: deque[float] = deque(maxlen=w)
        self._invalid: deque[float] = deque(maxlen=w)
        self._invalid_first: list[float] = []
        self._drops_before = 0.0
        self._len: deque[float] = deque(maxlen=w)
        self._len_base: list[float] = []
        self._before: float | None = None
        self._eval_alarm = None  # an alarms.Alarm while the last round stays below the one before RL
        self.edges = AlarmEdges(self.cfg.clear_after_steps)

    @property
    def active(self) -> dict:
        return self.edges.active

    @property
    def counts(self) -> Counter[str]:
        return self.edges.counts

    def step(self, rec: dict[str, float], now: float | None = None) -> list:
        """Take one step record; the alarms whose condition started to hold (``alarms.Alarm``);
        a clear waits in ``take_cleared``."""
        from rlvr.learner.watch.alarms import Alarm  # alarms.py imports this module for its config
        current: dict = {}
        for kind, message in self._check(rec):
            current[kind] = Alarm(kind, "", message, {}, [])
        if self._eval_alarm is not None:  # held until the next round says otherwise
            current["eval_regression"] = self._eval_alarm
        return self.edges.update(current, time.monotonic() if now is None else now)

    def take_cleared(self) -> list[AlarmCleared]:
        """The alarms that cleared since the last call."""
        return self.edges.take_cleared()

    def alerts(self) -> list[str]:
        return [a.message for a in self.active.values()]

    def eval_round(self, label: str, step: int, pass_at_1: float | None, now: float | None = None) -> list:
        """Take one held-out round's pass@1; the eval_regression alarm when it fell (new only)."""
        from rlvr.learner.watch.alarms import Alarm

        now = time.monotonic() if now is None else now
        if pass_at_1 is None:
            return []
        if label == "before" or self._before is None:
            self._before = pass_at_1
            return []
        drop = self._before - pass_at_1
        if drop < self.cfg.eval_drop:
            self._eval_alarm = None
            self.edges.clear("eval_regression", now)  # a round says so: no need to wait
            return []
        alarm = Alarm("eval_regression", "", f"held-out pass@1 fell from {100 * self._before:.1f}% before RL to "
                                             f"{100 * pass_at_1:.1f}% at step {step} ({label}): training is making "
                                             "the policy worse on problems it has not seen (check the reward: is it "
                                             "the task's?)", {}, [])
        self._eval_alarm = alarm
        return [alarm] if self.edges.hold("eval_regression", alarm, now) else []

    def _check(self, rec: dict[str, float]) -> list[tuple[str, str]]:
        cfg, out = self.cfg, []
        step = int(rec.get("step", 0))
        if "kl" in rec:
            kl = float(rec["kl"])
            self._kl.append(kl)
            before = self._kl[0]
            if kl > cfg.kl_max:
                out.append(("kl_high", f"KL to the reference {kl:.3g} at step {step}, above kl_max {cfg.kl_max:g}: "
                                       "the policy is moving away fast (lower the lr, raise kl_coef)"))
            elif len(self._kl) > 1 and before >= cfg.kl_floor and kl >= cfg.kl_jump * before:
                out.append(("kl_high", f"KL to the reference jumped {kl / before:.1f}x in {len(self._kl) - 1} steps "
                                       f"({before:.3g} -> {kl:.3g} at step {step})"))
        if "entropy" in rec:
            h = float(rec["entropy"])
            if len(self._entropy_base) < cfg.baseline_steps:
                self._entropy_base.append(h)
            base = statistics.fmean(self._entropy_base)
            if h < cfg.entropy_min or (len(self._entropy_base) == cfg.baseline_steps and h < cfg.entropy_drop * base):
                out.append(("entropy_collapse", f"entropy collapsed to {h:.3g} at step {step} (first "
                                                f"{len(self._entropy_base)} steps: {base:.3g}): the policy stopped "
                                                "exploring, so groups go flat; raise eps_high or the temperature"))
        if "foreign_script_share" in rec:
            self._foreign.append(float(rec["foreign_script_share"]))
            share = statistics.fmean(self._foreign)
            if len(self._foreign) == cfg.window_steps and share > cfg.foreign_share_max:
                out.append(("language_mixing", f"{100 * share:.1f}% of the letters of the last {len(self._foreign)} "
                                               f"steps' completions are outside the scripts {list(cfg.scripts)} "
                                               "(language mixing; set learn.alarms.steps.scripts if it is expected)"))
        if "response_clip_ratio" in rec:
            self._clip.append(float(rec["response_clip_ratio"]))
            share = statistics.fmean(self._clip)
            if len(self._clip) == cfg.window_steps and share >= cfg.clip_share_max:
                out.append(("length_at_cap", f"{100 * share:.0f}% of completions over the last {len(self._clip)} steps "
                                             f"were cut at max_tokens (mean length {rec.get('response_len_mean', 0):.0f}): "
                                             "raise learn.sampling.max_tokens or add overlong shaping"))
        if "response_len_mean" in rec:
            n = float(rec["response_len_mean"])
            self._len.append(n)
            if len(self._len_base) < cfg.baseline_steps:
                self._len_base.append(n)
            base, now = statistics.fmean(self._len_base), statistics.fmean(self._len)
            if len(self._len_base) == cfg.baseline_steps and len(self._len) == cfg.window_steps and \
                    now < cfg.length_drop * base:
                out.append(("length_collapse", f"completions shrank to {now:.1f} tokens on average over the last "
                                               f"{len(self._len)} steps, from {base:.1f} in the first steps: the "
                                               "policy is learning to say less (empty answers?)"))
        drops = sum(float(rec.get(k, 0.0)) for k in _DROPS)
        trained = float(rec.get("samples", 0.0))
        new_drops, self._drops_before = max(0.0, drops - self._drops_before), drops
        if new_drops + trained > 0:
            share = new_drops / (new_drops + trained)
            self._invalid.append(share)
            if len(self._invalid_first) < cfg.window_steps:
                self._invalid_first.append(share)
            now, first = statistics.fmean(self._invalid), statistics.fmean(self._invalid_first)
            full = len(self._invalid) == cfg.window_steps
            if full and (now >= cfg.invalid_share_max or now - first >= cfg.invalid_rise):
                out.append(("invalid_batches", f"{100 * now:.0f}% of the samples of the last {len(self._invalid)} "
                                               f"steps were dropped (zero variance, stale or partial), against "
                                               f"{100 * first:.0f}% in the first steps: most generation is wasted"))
        return out


__all__ = ["StepAlarmConfig", "StepWatch", "foreign_script_share", "script_of"]
