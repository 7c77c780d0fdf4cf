"""Each training prompt's accuracy every time it is drawn: ``<run_dir>/prompt_history.jsonl``.

One line per complete training group, written when the learner filters it
(trained or dropped alike, so a prompt whose group was all right or all wrong
is recorded too): ``{"i": dataset index, "s": step, "a": accuracy, "r":
reward}``, where ``a`` is the group's mean ``accuracy`` component (its mean
reward where the verifier names none) and ``r`` its mean reward, over the
samples whose verdict is a real judgement (``groups.judged``). A failed
verification (a timeout, a sandbox failure, a verifier error), an episode the
environment failed or the rollout cut, or a rejected prompt is no evidence
about the prompt: it is left out, never counted as a 0, and a group with no
real verdict at all is written with ``a`` and ``r`` null, which every reader
skips (``read_history``; the feeder's ``pass_rate`` curriculum gets the same
rewards). A prompt
drawn once per epoch then has one line per epoch: its accuracy history, which
``rlvr-actor select`` ranks (one-shot RLVR: Wang et al. 2025, "Reinforcement
Learning for Reasoning in Large Language Models with One Training Example",
rank training examples by the variance of their accuracy over epochs).

Replayed groups after a restart are recorded again (at-least-once, like the
metrics); ``select`` reads at most one line per (prompt, step).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

from rlvr.learner.custody.groups import judged
from rlvr.protocol import Scored

FILE = "prompt_history.jsonl"


class PromptHistory:
    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / FILE
        self._f = open(self.path, "a", buffering=1)  # noqa: SIM115 (lives with the learner)

    def record(self, step: int, members: list[Scored]) -> None:
        if not members or members[0].sample.purpose != "train":
            return
        rec: dict = {"i": members[0].sample.index, "s": step, "a": None, "r": None}
        real = [sc for sc in members if judged(sc)]  # a failed verification is missing, not a 0
        if real:
            rec["a"] = round(statistics.fmean(sc.verdict.components.get("accuracy", sc.verdict.reward)
                                              for sc in real), 6)
            rec["r"] = round(statistics.fmean(sc.verdict.reward for sc in real), 6)
        self._f.write(json.dumps(rec) + "\n")

    def close(self) -> None:
        self._f.close()


def read_history(run_dir: Path) -> dict[int, list[float]]:
    """Dataset index -> its accuracy at each draw, in step order (one per step). A draw with no
    real verdict (``a`` null: every verification failed) is no draw: skipped."""
    seen: dict[int, dict[int, float]] = defaultdict(dict)
    for line in (Path(run_dir) / FILE).read_text().splitlines():
        try:
            rec = json.loads(line)
            if rec["a"] is None:
                continue
            seen[int(rec["i"])].setdefault(int(rec["s"]), float(rec["a"]))
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line of a killed run
    return {i: [a for _, a in sorted(by_step.items())] for i, by_step in seen.items()}


def variance_ranking(history: dict[int, list[float]], min_draws: int = 2) -> list[tuple[int, float]]:
    """(index, variance of its accuracy) of every prompt drawn at least ``min_draws`` times, highest
    first (ties: the lower index first). Population variance, as the paper's ranking uses."""
    scored = [(i, statistics.pvariance(accs)) for i, accs in history.items() if len(accs) >= min_draws]
    return sorted(scored, key=lambda x: (-x[1], x[0]))


class SelectionError(ValueError):
    """A selection file that cannot be read, or names prompts the training split lacks."""


def read_selection(path: str) -> list[int]:
    """The dataset indices of a selection file (``rlvr-actor select``'s output)."""
    try:
        data = json.loads(Path(path).read_text())
        return [int(i) for i in data["indices"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SelectionError(f"learn.train_subset {path!r}: not a selection file ({type(e).__name__}: {e})") from None


def subset(train: list, indices: list[int]) -> list:
    """The training specs whose dataset index is selected, in the selection's order."""
    by_index = {s.index: s for s in train}
    missing = [i for i in indices if i not in by_index]
    if missing or not indices:
        raise SelectionError(f"learn.train_subset selects {missing[:5] or 'nothing'}: not in the training split")
    return [by_index[i] for i in indices]
