"""``rlvr-actor audit``: score labelled cases offline and report agreement, FN and FP rates.

The argument parsing and the printing; the audit itself is ``rlvr.verify.audit``
(the same ``VerifierPool`` the verify role uses). The input is JSON lines, a
JSON array, Parquet, or a Hugging Face dataset saved to disk (``save_to_disk``),
read as the learner reads a dataset. Exit codes: 0 done, 1 a rate above
``--max-fn-rate`` / ``--max-fp-rate`` or a case the verifier could not judge
(``error``, ``timeout``, ``sandbox_error``, an invalid spec: printed with its
reason), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import msgspec

DESCRIPTION = ("Score labelled cases (JSON lines, Parquet, a saved HF dataset) offline and report agreement, "
               "FN and FP rates, and every case the verifier failed or misjudged, with its reason.")


class Args(msgspec.Struct, frozen=True, kw_only=True):
    verifier: str
    input: str
    output: str
    params: str | None = None  # a JSON object
    pool_size: int = 2
    timeout_s: float = 30.0
    json: bool = False
    max_fn_rate: float | None = None
    max_fp_rate: float | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verifier", required=True, help="verifier name (math, code, exact, ...) or module:ATTR")
    parser.add_argument("--input", required=True,
                        help="labelled cases: JSON lines, a JSON array, Parquet, or a saved HF dataset directory")
    parser.add_argument("--output", required=True, help="where to write one verdict per case")
    parser.add_argument("--params", default=None, help="verifier params as a JSON object, merged under each case's")
    parser.add_argument("--pool-size", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="hard timeout per case (default 30)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--max-fn-rate", type=float, default=None, help="exit 1 if the FN rate is above this")
    parser.add_argument("--max-fp-rate", type=float, default=None, help="exit 1 if the FP rate is above this")


def run(args: Args) -> int:
    """Run the audit ``args`` describe; the exit code (0 ok, 1 over a threshold, 2 bad input)."""
    from rlvr.verify.audit import FAILED, format_summary, run_audit
    from rlvr.verify.registry import VerifierPluginError, VerifierSpecError, VerifierUnavailableError

    try:
        params = json.loads(args.params) if args.params else None
        if params is not None and not isinstance(params, dict):
            raise ValueError("--params must be a JSON object")
        summary = run_audit(
            args.verifier, _cases(Path(args.input)), args.output, pool_size=args.pool_size,
            timeout_s=args.timeout_s, params=params,
        )
    except (ValueError, OSError, VerifierUnavailableError, VerifierPluginError, VerifierSpecError) as e:
        # bad JSON, an unreadable file, an unknown verifier, a plug-in that does not import
        print(f"audit: {e}", file=sys.stderr)
        return 2
    print(msgspec.json.encode(summary).decode() if args.json else format_summary(summary))
    over = [
        name
        for name, rate, limit in (
            ("false-negative", summary.false_negative_rate, args.max_fn_rate),
            ("false-positive", summary.false_positive_rate, args.max_fp_rate),
        )
        if limit is not None and rate is not None and rate > limit
    ]
    for name in over:
        print(f"audit: {name} rate above the limit", file=sys.stderr)
    failed = sum(n for outcome, n in summary.outcomes.items() if outcome in FAILED)
    if failed:
        print(f"audit: {failed} of {summary.cases} cases were not judged (the verifier failed on them; "
              f"reasons above and in {args.output})", file=sys.stderr)
    return 1 if over or failed else 0


def _cases(path: Path) -> list:
    """The cases at ``path``, read as the learner reads a dataset file."""
    from rlvr.learner.data.dataset_records import DatasetError, read_file
    from rlvr.verify.audit import cases_from_records, read_cases

    if path.is_dir():  # a Hugging Face dataset saved with save_to_disk
        from datasets import load_from_disk

        data = load_from_disk(str(path))
        return cases_from_records(list(data), str(path))
    if path.suffix in (".jsonl", ".txt", ""):
        return read_cases(path)
    try:
        return cases_from_records(read_file(path), str(path))
    except DatasetError as e:
        raise ValueError(str(e)) from None
