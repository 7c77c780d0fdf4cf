"""``rlvr-actor select``: pick training prompts from a run's accuracy history (one-shot RLVR).

    rlvr-actor select --from RUN_DIR --by variance --k 1 --output one.json
    rlvr-actor select --from RUN_DIR --by random --k 1 --seed 3 --output random-one.json

``--by variance`` ranks every training prompt drawn at least twice by the
variance of its accuracy over its draws (``<run_dir>/prompt_history.jsonl``),
highest first, as Wang et al. 2025 ("Reinforcement Learning for Reasoning in
Large Language Models with One Training Example") rank examples for 1-shot
RLVR; ``--by random`` draws the same number uniformly from the same prompts,
the control. The output names the dataset indices (what ``[learn]
train_subset`` reads), their scores and histories, and the prompts
themselves so a person can read what was picked.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Literal

import msgspec

DESCRIPTION = ("Write the k training prompts of a run with the highest variance of accuracy over their draws "
               "(one-shot RLVR), or a random k of them, for [learn] train_subset.")


class Args(msgspec.Struct, frozen=True, kw_only=True):
    from_: str
    by: Literal["variance", "random"] = "variance"
    k: int = 1
    seed: int = 0
    min_draws: int = 2
    output: str


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="from_", required=True, help="the run directory (with prompt_history.jsonl)")
    p.add_argument("--by", choices=("variance", "random"), default="variance")
    p.add_argument("--k", type=int, default=1, help="prompts to select")
    p.add_argument("--seed", type=int, default=0, help="--by random: the draw's seed")
    p.add_argument("--min-draws", type=int, default=2, help="prompts drawn fewer times are not ranked")
    p.add_argument("--output", required=True, help="the selection file (JSON) to write")


def select(run_dir: Path, by: str, k: int, *, seed: int = 0, min_draws: int = 2) -> dict:
    from rlvr.learner.data.history import read_history, variance_ranking

    history = read_history(run_dir)
    ranked = variance_ranking(history, min_draws=min_draws)
    if not ranked:
        raise SelectionEmptyError(f"no prompt of {run_dir} was drawn {min_draws} times or more: run it longer")
    if by == "variance":
        picked = ranked[:k]
    else:
        picked = random.Random(seed).sample(ranked, min(k, len(ranked)))
    return {
        "from": str(run_dir), "by": by, "k": k, "seed": seed if by == "random" else None,
        "ranked_prompts": len(ranked),
        "indices": [i for i, _ in picked],
        "variance": [v for _, v in picked],
        "history": [history[i] for i, _ in picked],
        "source": "Wang et al. 2025, One-shot RLVR: rank by the variance of training accuracy over epochs",
    }


class SelectionEmptyError(ValueError):
    pass


def _prompts(run_dir: Path, indices: list[int]) -> list:
    """The selected prompts, from the run's own config (for a person to read); [] when it cannot be read."""
    try:
        from rlvr.cli.run_config import load_config
        from rlvr.learner.data.datasets import load_splits

        cfg = load_config(run_dir / "config.json")
        by_index = {s.index: s.prompt for s in load_splits(cfg.learn.dataset, seed=cfg.seed).train}
        return [msgspec.to_builtins(by_index.get(i)) for i in indices]
    except Exception:  # noqa: BLE001 - the prompts are a courtesy; the indices are the selection
        return []


def run(args: Args) -> int:
    run_dir = Path(args.from_)
    if not (run_dir / "prompt_history.jsonl").is_file():
        print(f"rlvr-actor select: {run_dir} has no prompt_history.jsonl (a run of this version writes one)",
              file=sys.stderr)
        return 2
    try:
        out = select(run_dir, args.by, args.k, seed=args.seed, min_draws=args.min_draws)
    except SelectionEmptyError as e:
        print(f"rlvr-actor select: {e}", file=sys.stderr)
        return 1
    out["prompts"] = _prompts(run_dir, out["indices"])
    Path(args.output).write_text(json.dumps(out, indent=2))
    print(f"selected {len(out['indices'])} of {out['ranked_prompts']} prompts by {args.by}: {out['indices']} "
          f"-> {args.output}")
    return 0
