"""From a group's scored samples to per-token advantages: process rewards in the learner.

``[learn.engine.advantage] process`` says where each sample's steps come from:

- ``"steps"``: the verdict's ``steps`` (a step verifier: ``arith_steps``,
  ``math_steps``, or a plug-in that fills them). A step ends at a character
  offset of ``Sample.text``; ``StepAligner`` finds the token it ends in by
  decoding prefixes of the completion's ids with the model's tokenizer (as
  the rollout decoded them), so no token is ever re-encoded. For an episode,
  ``Sample.text`` is its last assistant turn, and the offsets are read
  within that turn's tokens.
- ``"turns"``: a multi-turn episode's per-turn environment rewards
  (``Episode.turn_rewards``), each ending at the last token of its turn.

Then ``learner/algos/process.py`` normalises the step rewards over the group
and credits each token with the steps at or after it, plus
``outcome_weight`` times the outcome advantage. A sample whose steps cannot
be placed (its text is not what its ids decode to) keeps only the outcome
part and is counted (``process_unaligned``); a group with no step at all
trains on the outcome advantage alone (``process_groups_without_steps``). A
completion with no step in a group whose others have steps counts as one
failed step ending at its last token (the group's worst step reward, at most
0): skipping the steps must never pay better than taking a wrong one.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable

import torch

from rlvr.learner.algos.advantages import compute_advantages
from rlvr.learner.algos.config import AdvantageConfig
from rlvr.learner.algos.process import mix_outcome, process_advantages
from rlvr.protocol import Scored


class StepAligner:
    """Character offsets of a completion's text -> the index of the token each ends in."""

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self.decode = decode

    @classmethod
    def for_model(cls, model_path: str) -> StepAligner:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_path)
        return cls(lambda ids: tok.decode(ids, skip_special_tokens=True))

    def token_ends(self, ids: list[int], text: str, char_ends: list[int]) -> list[int] | None:
        """The last token index of each step (ascending), or None when ``ids`` do not decode to ``text``."""
        if self.decode(ids) != text:
            return None
        prefix = functools.lru_cache(maxsize=None)(lambda k: len(self.decode(ids[:k])))
        out: list[int] = []
        for end in char_ends:
            lo, hi = 1, len(ids)  # the smallest k whose prefix covers `end` characters
            while lo < hi:
                mid = (lo + hi) // 2
                if prefix(mid) >= end:
                    hi = mid
                else:
                    lo = mid + 1
            k = lo - 1
            if out and k <= out[-1]:
                k = out[-1] + 1  # two steps ending in one token: the later one ends at the next
            if k >= len(ids):
                return None
            out.append(k)
        return out


def _steps_of(sc: Scored, cfg: AdvantageConfig, aligner: StepAligner | None, counts: Counter) -> tuple[list[float], list[int]]:
    """(rewards, token ends) of one sample's steps; empty when it has none (or they cannot be placed)."""
    s = sc.sample
    ids = s.completion.ids
    if cfg.process == "turns":
        e = s.episode
        if e is None or not e.turn_rewards:
            return [], []
        pairs = list(zip(e.turn_rewards, (t.end - 1 for t in e.turns)))
        return [r for r, _ in pairs], [end for _, end in pairs]
    steps = sc.verdict.steps
    if not steps:
        return [], []
    offset, span = 0, ids
    if s.episode is not None and s.episode.turns:  # the text is the last turn's: place within its tokens
        last = s.episode.turns[-1]
        offset, span = last.start, ids[last.start:last.end]
    assert aligner is not None
    ends = aligner.token_ends(span, s.text, [st.end for st in steps])
    if ends is None:
        counts["process_unaligned"] += 1
        return [], []
    return [st.reward for st in steps], [offset + e for e in ends]


def group_token_advantages(group: list[Scored], cfg: AdvantageConfig, aligner: StepAligner | None,
                           counts: Counter) -> tuple[list[float], list[list[float]] | None]:
    """The outcome advantage of each sample, and (with ``cfg.process``) its per-token advantages."""
    rewards = torch.tensor([sc.verdict.reward for sc in group], dtype=torch.float32)
    outcome = compute_advantages(rewards, cfg).tolist()  # [G]
    if cfg.process == "off":
        return outcome, None
    steps = [_steps_of(sc, cfg, aligner, counts) for sc in group]
    if not any(r for r, _ in steps):
        counts["process_groups_without_steps"] += 1
        return outcome, None
    counts["process_steps"] += sum(len(r) for r, _ in steps)
    lengths = [len(sc.sample.completion.ids) for sc in group]
    # A completion with no step among others that have some counts as one failed step (the group's
    # worst step reward, at most 0) ending at its last token: writing no steps must not pay.
    worst = min(0.0, min(r for rs, _ in steps for r in rs))
    steps = [(rs, ends) if rs else ([worst], [n - 1]) for (rs, ends), n in zip(steps, lengths)]
    token_adv = process_advantages([r for r, _ in steps], [e for _, e in steps], lengths, cfg.eps)  # [G][T_i]
    if cfg.outcome_weight:
        token_adv = mix_outcome(token_adv, outcome, cfg.outcome_weight)
    return outcome, token_adv
