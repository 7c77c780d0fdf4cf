"""``rlvr-actor audit``: score labelled cases offline and report agreement, FN and FP rates.

The argument parsing and the printing; the audit itself is ``rlvr.verify.audit``
(the same ``VerifierPool`` the verify role uses). Exit codes: 0 done, 1 a rate
above ``--max-fn-rate`` / ``--max-fp-rate``, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys

import msgspec

DESCRIPTION = "Score a labelled JSONL file offline and report agreement, FN and FP rates."


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
    parser.add_argument("--input", required=True, help="labelled cases, JSON lines")
    parser.add_argument("--output", required=True, help="where to write one verdict per case")
    parser.add_argument("--params", default=None, help="verifier params as a JSON object, merged under each case's")
    parser.add_argument("--pool-size", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="hard timeout per case (default 30)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--max-fn-rate", type=float, default=None, help="exit 1 if the FN rate is above this")
    parser.add_argument("--max-fp-rate", type=float, default=None, help="exit 1 if the FP rate is above this")


def run(args: Args) -> int:
    """Run the audit ``args`` describe; the exit code (0 ok, 1 over a threshold, 2 bad input)."""
    from rlvr.verify.audit import format_summary, run_audit
    from rlvr.verify.registry import VerifierPluginError, VerifierSpecError, VerifierUnavailableError

    try:
        params = json.loads(args.params) if args.params else None
        if params is not None and not isinstance(params, dict):
            raise ValueError("--params must be a JSON object")
        summary = run_audit(
            args.verifier, args.input, args.output, pool_size=args.pool_size, timeout_s=args.timeout_s, params=params
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
    return 1 if over else 0
