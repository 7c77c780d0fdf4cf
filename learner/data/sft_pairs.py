"""Supervised pairs: the data of an ``sft`` stage and of ``rejection_sft``'s kept set.

A pairs file is JSON lines, one pair per line::

    {"prompt": "37+45=", "completion": "82"}
    {"prompt": [{"role": "user", "content": "..."}], "completion": "...", "prompt_ids": [...], "completion_ids": [...]}

``prompt`` is text or chat messages, ``completion`` text. A pair may carry its
token ids as well (the kept set of rejection sampling does: the tokens the policy
wrote, never re-tokenised from its text); the SFT step then trains on those ids.
Each line is checked on reading; a bad one is an error naming its line and key.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from rlvr.learner.data.datasets import load_splits

# Lines read from a pairs file at most: an SFT stage's data fits in memory.
MAX_PAIRS = 1_000_000


class Message(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    role: str
    content: str


class SFTPair(msgspec.Struct, frozen=True, omit_defaults=True):
    prompt: str | list[Message]
    completion: str
    # The tokens, when the pair comes from the policy's own samples (tokens in, tokens out).
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    # Where the pair came from (rejection sampling: the dataset index, the sample id, the reward).
    source: dict[str, str | int | float] = {}


class PairsFileError(ValueError):
    """A pairs file that cannot be read as SFT pairs; the message names the file, line and key."""


def read_pairs(path: str | Path) -> list[SFTPair]:
    """Every pair of ``path``; a missing file, an empty one or a bad line is a ``PairsFileError``."""
    path = Path(path)
    if not path.is_file():
        raise PairsFileError(f"SFT data {path}: no such file")
    decoder = msgspec.json.Decoder(SFTPair)
    out: list[SFTPair] = []
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            if len(out) >= MAX_PAIRS:
                raise PairsFileError(f"SFT data {path}: more than {MAX_PAIRS} pairs")
            try:
                pair = decoder.decode(line)
            except (msgspec.ValidationError, msgspec.DecodeError) as e:
                raise PairsFileError(f"SFT data {path} line {n}: {e}") from None
            if (pair.prompt_ids is None) != (pair.completion_ids is None):
                raise PairsFileError(f"SFT data {path} line {n}: prompt_ids and completion_ids come together")
            if pair.completion_ids is not None and not pair.completion_ids:
                raise PairsFileError(f"SFT data {path} line {n}: completion_ids is empty")
            if pair.completion_ids is None and not pair.completion:
                raise PairsFileError(f"SFT data {path} line {n}: completion is empty")
            out.append(pair)
    if not out:
        raise PairsFileError(f"SFT data {path}: no pairs")
    return out


def write_pairs(path: str | Path, pairs: list[SFTPair]) -> None:
    """Write ``pairs`` to ``path`` whole (a temporary file, then a rename: a reader never sees half)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    enc = msgspec.json.Encoder()
    with open(tmp, "wb") as f:
        for p in pairs:
            f.write(enc.encode(p) + b"\n")
    tmp.replace(path)


def pairs_from_dataset(dataset, *, seed: int, limit: int = 0) -> list[SFTPair]:
    """The train split of a ``[learn.dataset]`` as pairs: each prompt with its reference answer
    (the built-in example's golds, a jsonl dataset's answers). A task without a reference is an error."""
    specs = load_splits(dataset, seed=seed).train
    if limit:
        specs = specs[:limit]
    out = []
    for s in specs:
        if not s.reference:
            raise PairsFileError(f"SFT data \"@dataset\": task {s.dataset} {s.index} has no reference answer; "
                                 "give the stage a pairs file (stages[].data)")
        prompt = s.prompt if isinstance(s.prompt, str) else [Message(m.role, m.content) for m in s.prompt]
        out.append(SFTPair(prompt=prompt, completion=s.reference, source={"dataset": s.dataset, "index": s.index}))
    return out
