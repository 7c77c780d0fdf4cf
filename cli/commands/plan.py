"""``rlvr-actor plan``: the dry run and the memory planner. Nothing starts, nothing downloads.

Resolves the whole config and prints it, runs the start-up checks (``rlvr.cli.plan.checks``),
reads the model's shape from its config alone (``shapes``), and prints the memory plan per role
and GPU (``planner``, ``memory``) and a cost estimate (``cost``). Exit codes: 0 the run can
start, 1 a check failed or a role does not fit (each line names the config key and the fix),
2 a config that does not load. docs/plan.md explains every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

import msgspec

DESCRIPTION = ("Dry run: resolve the config, import every plug-in, open every dataset, load the model's config "
               "and tokenizer, check the chat template; then the memory plan per role and GPU (what does not fit "
               "and which setting fixes it) and a cost estimate. Nothing starts, nothing downloads.")


class Args(msgspec.Struct, frozen=True, kw_only=True):
    config: str | None = None  # None: the built-in example
    gpus: int = 1  # per node (0: plan without a GPU)
    nodes: int = 1
    gpu_memory: str | None = None  # e.g. "80GiB"; None: report the need without fitting it
    set: list[str] = []
    json: bool = False
    quiet_config: bool = False
    mfu: float = 0.2
    peak_tflops: float = 989.4
    decode_tps: float = 5000.0
    keep: float = 1.0
    gpu_hour_price: float = 0.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML config (default: the built-in example)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs per node (default 1; 0: no GPU)")
    p.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    p.add_argument("--gpu-memory", help="memory of one GPU, e.g. 80GiB or 141GiB (default: report the need only)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key, VALUE in TOML (repeatable), as for `up`")
    p.add_argument("--json", action="store_true", help="print the whole plan as JSON")
    p.add_argument("--quiet-config", action="store_true", help="do not print the resolved config")
    p.add_argument("--mfu", type=float, default=0.2, help="assumed learner MFU for the estimate (default 0.2)")
    p.add_argument("--peak-tflops", type=float, default=989.4, help="dense bf16 peak per GPU (default 989.4: H100/H200)")
    p.add_argument("--decode-tps", type=float, default=5000.0,
                   help="assumed rollout decode tokens/s per GPU, all sequences together (default 5000)")
    p.add_argument("--keep", type=float, default=1.0, help="assumed share of groups dynamic sampling keeps (default 1)")
    p.add_argument("--gpu-hour-price", type=float, default=0.0, help="price of one GPU-hour, for a cost figure")


def run(args: Args) -> int:
    from rlvr.cli.commands.up import builtin_config_path, parse_sets
    from rlvr.cli.plan.cost import CostAssumptions
    from rlvr.cli.plan.planner import make_plan, parse_bytes
    from rlvr.cli.run_config import ConfigError, dump_config, load_config

    path = args.config or builtin_config_path()
    try:
        gpu_bytes = parse_bytes(args.gpu_memory) if args.gpu_memory else None
        cfg = load_config(path, overrides=parse_sets(args.set))
    except (ConfigError, ValueError) as e:
        print(f"rlvr-actor plan: {e}", file=sys.stderr)
        return 2
    from rlvr.cli.plan.checks import run_checks

    # What the checks log (a dataset's layout, a template's warning) goes to stderr: stdout is the report,
    # and with --json a document a program parses. (Logging is not configured in this command: structlog's
    # default writes to stdout.)
    with contextlib.redirect_stdout(sys.stderr):
        findings, tokenizer, tasks = run_checks(cfg)
        shape, shape_error = _shape(cfg)
        plan = None
        if shape is not None:
            plan = make_plan(cfg, shape, gpus=args.gpus, nodes=args.nodes, gpu_bytes=gpu_bytes,
                             prompt_tokens=_prompt_tokens(tokenizer, tasks),
                             assumptions=CostAssumptions(mfu=args.mfu, peak_tflops=args.peak_tflops,
                                                         decode_tokens_per_s=args.decode_tps, keep=args.keep,
                                                         gpu_hour_price=args.gpu_hour_price))
    if shape_error and not any(f.key == shape_error.key and not f.ok for f in findings):
        findings = [*findings, shape_error]  # a missing model folder is said once
    failed = [f for f in findings if not f.ok]
    can_start = not failed and not (plan and plan.problems)
    if args.json:
        out = {"config": json.loads(dump_config(cfg)), "findings": msgspec.to_builtins(findings),
               "plan": msgspec.to_builtins(plan) if plan else None, "can_start": can_start}
        print(json.dumps(out, indent=2))
    else:
        from rlvr.cli.plan.report import format_report

        if not args.quiet_config:
            print(f"# resolved config ({path})")
            print(dump_config(cfg).decode())
        print(format_report(findings, plan))
        print(f"verdict: {'the run can start' if can_start else 'the run cannot start as configured (see FAIL above)'}")
    return 0 if can_start else 1


def _shape(cfg):
    """The model's shape, or the finding that says why it cannot be read."""
    from rlvr.cli.plan.checks import Finding, model_paths
    from rlvr.cli.plan.shapes import PREPARED, ShapeError, model_shape, prepared_shape

    paths = model_paths(cfg)
    if not paths:
        return None, None  # the trivial engine and a dry learner: no model
    key, path = paths[0]
    try:
        if path == PREPARED:
            return (prepared_shape(cfg.learn.prepare), None) if cfg.learn.prepare else (None, None)
        return model_shape(path), None
    except ShapeError as e:
        return None, Finding(key, False, f"memory plan: {e}")


def _prompt_tokens(tokenizer, tasks) -> float | None:
    """Mean prompt length in tokens over up to 64 tasks, rendered as the engines render them."""
    from rlvr.rollout.engines.base import render_prompt_ids

    if tokenizer is None or not tasks:
        return None
    lengths = []
    for t in tasks[:64]:
        try:
            lengths.append(len(render_prompt_ids(tokenizer, t.prompt)))
        except Exception:  # noqa: BLE001 - a template that fails is check_chat_template's finding
            continue
    return sum(lengths) / len(lengths) if lengths else None
