"""Rejection sampling's kept set: which of the policy's samples an SFT stage trains on.

The samples come from the normal rollout path (feeder -> rollout -> verifier ->
learner) of a dry learner, which writes each group it takes to
``samples/step-<N>.jsonl`` (``learner/watch/sample_dump.py``). ``select`` reads
those records and keeps, in this order, each filter counting what it removes:

1. ``rejected``: the verifier did not accept the sample (outcome not ``ok``, or
   its accuracy, the reward without an ``accuracy`` component, not above 0);
2. ``too_short`` / ``too_long``: fewer than ``min_tokens`` or more than
   ``max_tokens`` completion tokens;
3. ``truncated``: cut by the sampling limit (``finish_reason = "length"``)
   when ``drop_truncated``;
4. ``language_mixing``: a share of letters outside ``scripts`` above
   ``foreign_share_max`` (the same measure as the ``language_mixing`` alarm,
   ``learner/watch/step_alarms.py``);
5. ``duplicate``: the same completion for the same prompt, kept once when ``dedup``;
6. ``over_per_prompt``: beyond ``max_per_prompt`` kept for one prompt.

What is kept becomes SFT pairs with the policy's own token ids (``sft_pairs``).
Pure: records in, pairs and counts out.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from rlvr.learner.data.sft_pairs import Message, SFTPair, write_pairs
from rlvr.learner.watch.step_alarms import foreign_script_share

FILTERS = ("rejected", "too_short", "too_long", "truncated", "language_mixing", "duplicate", "over_per_prompt")


class RejectionFilters(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    # Keep at most this many accepted completions per prompt (0 = all).
    max_per_prompt: Annotated[int, Meta(ge=0)] = 0
    # Keep one copy of a completion written twice for the same prompt.
    dedup: bool = True
    # Completion tokens at least...
    min_tokens: Annotated[int, Meta(ge=0)] = 0
    # ...and at most (0 = no bound).
    max_tokens: Annotated[int, Meta(ge=0)] = 0
    # Drop completions cut by the sampling limit (finish_reason "length").
    drop_truncated: bool = True
    # Drop completions whose share of letters outside `scripts` is above this (1 = off).
    foreign_share_max: Annotated[float, Meta(ge=0, le=1)] = 1.0
    # The Unicode scripts completions are expected in (the language-mixing alarm's measure).
    scripts: tuple[str, ...] = ("LATIN",)

    def __post_init__(self) -> None:
        if self.max_tokens and self.max_tokens < self.min_tokens:
            raise ValueError(f"max_tokens ({self.max_tokens}) is below min_tokens ({self.min_tokens})")


def accepted(record: dict[str, Any]) -> bool:
    """The verifier accepted the sample: outcome ``ok`` and its accuracy above 0
    (a composite verifier's format part alone does not make an answer right)."""
    v = record["verdict"]
    return v["outcome"] == "ok" and float((v.get("components") or {}).get("accuracy", v["reward"])) > 0


def _prompt_key(record: dict[str, Any]) -> str:
    return f"{record['dataset']}/{record['index']}"


def select(records: list[dict[str, Any]], filters: RejectionFilters) -> tuple[list[SFTPair], dict[str, int]]:
    """The kept pairs, in the records' order, and counts: ``sampled``, each filter's removals, ``kept``."""
    counts: Counter[str] = Counter({name: 0 for name in FILTERS})
    seen: set[tuple[str, tuple[int, ...]]] = set()
    per_prompt: Counter[str] = Counter()
    kept: list[SFTPair] = []
    for r in records:
        ids = r["completion_ids"]
        key = _prompt_key(r)
        if not accepted(r):
            reason = "rejected"
        elif len(ids) < filters.min_tokens:
            reason = "too_short"
        elif filters.max_tokens and len(ids) > filters.max_tokens:
            reason = "too_long"
        elif filters.drop_truncated and r.get("finish_reason") == "length":
            reason = "truncated"
        elif filters.foreign_share_max < 1 and foreign_script_share([r["text"]], filters.scripts) > filters.foreign_share_max:
            reason = "language_mixing"
        elif filters.dedup and (key, tuple(ids)) in seen:
            reason = "duplicate"
        elif filters.max_per_prompt and per_prompt[key] >= filters.max_per_prompt:
            reason = "over_per_prompt"
        else:
            reason = ""
        if reason:
            counts[reason] += 1
            continue
        seen.add((key, tuple(ids)))
        per_prompt[key] += 1
        kept.append(_pair(r))
    return kept, {"sampled": len(records), **dict(counts), "kept": len(kept), "prompts_kept": len(per_prompt)}


def _pair(r: dict[str, Any]) -> SFTPair:
    prompt = r["prompt"] if isinstance(r["prompt"], str) else [Message(m["role"], m["content"]) for m in r["prompt"]]
    mask = r.get("mask") or []
    if mask and not all(mask):  # an episode: the environment's tokens are not the policy's to imitate
        raise ValueError(f"sample {r['sample_id']}: multi-turn episodes are not taken into rejection SFT")
    return SFTPair(prompt=prompt, completion=r["text"], prompt_ids=list(r["prompt_ids"]),
                   completion_ids=list(r["completion_ids"]),
                   source={"sample_id": r["sample_id"], "dataset": r["dataset"], "index": r["index"],
                           "reward": float(r["verdict"]["reward"]), "finish_reason": r.get("finish_reason") or ""})


def read_dumps(out_dir: str | Path, upto_step: int) -> list[dict[str, Any]]:
    """The sample records a dry learner wrote for steps 1..``upto_step`` (its committed steps)."""
    from rlvr.learner.watch.sample_dump import step_file

    records: list[dict[str, Any]] = []
    for step in range(1, upto_step + 1):
        path = step_file(Path(out_dir), step)
        if not path.is_file():
            raise FileNotFoundError(f"rejection sampling: {path} is missing (learn.samples.dump must stay on)")
        records.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return records


def write_kept(directory: str | Path, kept: list[SFTPair], counts: dict[str, int]) -> Path:
    """``kept.jsonl`` (the SFT stage's data) and ``kept_counts.json`` beside it; the data's path."""
    directory = Path(directory)
    write_pairs(directory / "kept.jsonl", kept)
    tmp = directory / "kept_counts.json.tmp"
    tmp.write_text(json.dumps(counts, indent=2))
    tmp.replace(directory / "kept_counts.json")
    return directory / "kept.jsonl"
