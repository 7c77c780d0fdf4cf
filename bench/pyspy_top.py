"""The inclusive share of each frame in a py-spy ``--format raw`` profile, optionally under one frame.

    py-spy record -r 200 -f raw -o /tmp/p.raw -- .venv/bin/python bench/learner_step.py --only step
    .venv/bin/python bench/pyspy_top.py /tmp/p.raw --under train_step --top 40

With ``--threads`` profiles (py-spy record --threads), ``--by-thread`` first splits the samples by thread.
The text it prints is what bench/results/*_profile.txt keep (the raw files are megabytes).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path


def read(path: Path) -> list[tuple[list[str], int]]:
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        stack, count = line.rsplit(" ", 1)
        out.append((stack.split(";"), int(count)))
    return out


def shares(stacks: list[tuple[list[str], int]], under: str = "") -> tuple[int, Counter]:
    total, inclusive = 0, Counter()
    for frames, n in stacks:
        if under and not any(under in f for f in frames):
            continue
        total += n
        for f in set(frames):
            inclusive[f] += n
    return total, inclusive


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("raw", type=Path)
    p.add_argument("--under", default="", help="only samples whose stack holds a frame containing this")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--by-thread", action="store_true", help="first: the samples of each thread (first frame)")
    args = p.parse_args(argv)
    stacks = read(args.raw)
    if args.by_thread:
        threads = Counter()
        for frames, n in stacks:
            threads[frames[0]] += n
        all_n = sum(threads.values())
        print(f"{all_n} samples by thread")
        for t, n in threads.most_common():
            print(f"{100 * n / all_n:5.1f}%  {t[:140]}")
        print()
    total, inclusive = shares(stacks, args.under)
    print(f"{total} samples{' under ' + repr(args.under) if args.under else ''}")
    for frame, n in inclusive.most_common(args.top):
        print(f"{100 * n / total:5.1f}%  {frame[:140]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
