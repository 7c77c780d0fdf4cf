"""``rlvr-actor samples RUN_DIR``: read what the learner trained.

    rlvr-actor samples runs/calculator                       # the last step, in the terminal
    rlvr-actor samples runs/calculator --step 40 --limit 3
    rlvr-actor samples runs/calculator --episode calculator-t17/2
    rlvr-actor samples runs/calculator --format html --output step.html
    rlvr-actor samples runs/calculator --format jsonl         # the raw records

The learner writes every trained sample of a step to
``<run_dir>/samples/step-<N>.jsonl`` (learner/watch/sample_dump.py). This
command shows each one whole, every segment of an agent's episode with its
own prompt (cli/ui/samples_view.py): each turn with its loss mask (the
policy's tokens, trained on, apart from the environment's, masked), the
policy version and behaviour log-probs, the tools' calls and errors, the
environment's info, how the episode ended, the verdict, the reward and the
advantage; and, for a whole step, the tokens it trained (the learner's
``tokens`` and ``response_tokens`` in ``metrics.jsonl``). ``text`` is for a
terminal (environment tokens on lines of their own, ``[env]``); ``html`` is
one self-contained file (no external resource; every piece of model or
environment text escaped: model output is untrusted); ``jsonl`` is the
records as written. docs/samples.md shows how to read them.

Token text is decoded with the run's tokenizer when one is found
(``--tokenizer``, else the model the run's config names, else
``<run_dir>/model``); without one, each turn's text comes from the episode's
transcript and the tokens are shown as ids. Reads files only: no bus, no torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Literal

import msgspec

from rlvr.cli.ui.samples_view import format_html, format_text, step_tokens

DESCRIPTION = ("Show the samples the learner trained (<run_dir>/samples/step-N.jsonl), every segment whole: "
               "prompt, turns with their loss mask, policy versions, log-probs, tools, info, verdict, reward, "
               "advantage, and the tokens each step trained.")


class Args(msgspec.Struct, frozen=True, kw_only=True):
    run_dir: str
    step: int | None = None
    episode: str | None = None
    format: Literal["text", "html", "jsonl"] = "text"
    output: str | None = None
    limit: int = 20
    tokenizer: str | None = None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="the run directory (the learner's out_dir, with samples/)")
    p.add_argument("--step", type=int, help="the optimizer step to show (default: the last one written)")
    p.add_argument("--episode", help="one sample (TASK_ID/INDEX) or every sample of a group (its id), "
                                     "searched in every step unless --step is given")
    p.add_argument("--format", choices=("text", "html", "jsonl"), default="text")
    p.add_argument("--output", help="write here instead of standard output")
    p.add_argument("--limit", type=int, default=20, help="samples to show at most (0: all)")
    p.add_argument("--tokenizer", help="a tokenizer.json, or a model folder with one, to show token text")


class SamplesMissingError(FileNotFoundError):
    """The run directory has no sample dump (or not the step asked for)."""


# --- reading ------------------------------------------------------------------------
def read_records(run_dir: Path, step: int | None = None, episode: str | None = None) -> list[dict[str, Any]]:
    """The records of ``step`` (default: the last step, or every step when looking for ``episode``)."""
    from rlvr.learner.watch.sample_dump import SAMPLES_DIR, step_file

    files = sorted((Path(run_dir) / SAMPLES_DIR).glob("step-*.jsonl"))
    if step is not None:
        files = [f for f in files if f == step_file(run_dir, step)]
    elif episode is None:
        files = files[-1:]
    if not files:
        what = f"step {step}" if step is not None else "any step"
        raise SamplesMissingError(f"{Path(run_dir) / SAMPLES_DIR} has no samples of {what} "
                                  "(the learner writes them after each step: [learn.samples] dump)")
    out = []
    for f in files:
        for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                # The learner replaces a step's file whole, so such a line was damaged afterwards: said,
                # never skipped in silence (the step's token count would come up short).
                print(f"rlvr-actor samples: {f}:{n} is not a JSON record (skipped)", file=sys.stderr)
                continue
            if isinstance(rec, dict) and (episode is None or episode in (rec.get("sample_id"), rec.get("group_id"))):
                out.append(rec)
    return out


def find_tokenizer(run_dir: Path, given: str | None = None):
    """A ``tokenizers.Tokenizer`` for the run's model, or None (the view then shows ids)."""
    candidates = [Path(given)] if given else []
    if not given:
        try:
            cfg = json.loads((Path(run_dir) / "config.json").read_text())
            engine = (cfg.get("learn") or {}).get("engine") or {}
            candidates += [Path(p) for p in (engine.get("model_path"), cfg.get("rollout", {}).get("engine", {}).get("model"))
                           if isinstance(p, str) and p]
        except (OSError, ValueError, AttributeError):
            pass
        candidates.append(Path(run_dir) / "model")
    for c in candidates:
        path = c / "tokenizer.json" if c.is_dir() else c
        if path.is_file():
            try:
                from tokenizers import Tokenizer

                return Tokenizer.from_file(str(path))
            except Exception:  # noqa: BLE001 - no tokenizer (or not this kind): the view shows ids
                continue
    return None


# --- the command -------------------------------------------------------------------------
def run(args: Args) -> int:
    run_dir = Path(args.run_dir)
    try:
        records = read_records(run_dir, args.step, args.episode)
    except SamplesMissingError as err:
        print(f"rlvr-actor samples: {err}", file=sys.stderr)
        return 2
    if not records:
        print(f"rlvr-actor samples: no sample {args.episode!r} in {run_dir}", file=sys.stderr)
        return 1
    # A whole step's totals (what the learner's `tokens` counts), before --limit cuts what is shown;
    # none for the samples of one episode.
    steps = step_tokens(records) if args.episode is None else None
    if args.limit > 0:
        records = records[: args.limit]
    if args.format == "jsonl":
        out = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    else:
        tok = find_tokenizer(run_dir, args.tokenizer)
        out = format_text(records, tok, steps) if args.format == "text" else \
            format_html(records, tok, f"samples of {run_dir}", steps)
    if args.output:
        Path(args.output).write_text(out, encoding="utf-8")
        print(f"{len(records)} samples -> {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(out)
    return 0
