"""``rlvr-actor``: the one entry point.

    rlvr-actor --role rollout|verify|learn --config run.toml [--nats URL] [--run ID]
    rlvr-actor up [--config run.toml]           # embedded NATS + every role, locally
    rlvr-actor status [--nats URL] [--run ID]   # replicas, streams, consumers
    rlvr-actor init [--config run.toml]          # create the run's streams and consumers
    rlvr-actor audit --verifier NAME --input cases.jsonl --output verdicts.jsonl
    rlvr-actor eval --checkpoint DIR --data FILE --k 1,8
    rlvr-actor report RUN_DIR
    rlvr-actor config-doc                        # every config option, from the types

Thin on purpose: only argparse and the standard library are imported at the
top, so ``--help`` is instant, and each command imports what it needs, so
``--role verify`` never imports torch.
"""

from __future__ import annotations

import argparse
import os
import sys

ROLES = ("rollout", "verify", "learn")
COMMANDS = ("up", "init", "status", "audit", "eval", "report", "config-doc")


def _role_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rlvr-actor",
        description="Event-driven RLVR (GRPO/DAPO) over NATS JetStream. "
        f"Run one actor with --role, or a command: {', '.join(COMMANDS)} (each has --help).",
    )
    p.add_argument("--role", choices=ROLES, required=True, help="the actor to run")
    p.add_argument("--config", help="TOML config file (defaults when omitted)")
    p.add_argument("--nats", help="NATS URL(s), overrides [nats].url")
    p.add_argument("--run", help="run id, overrides `run`")
    p.add_argument("--replica", help="replica id (default: <role>-<host>-<pid>)")
    return p


def _command_parser(cmd: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"rlvr-actor {cmd}")
    if cmd == "up":
        p.description = "Start an embedded nats-server and every role as its own process."
        p.add_argument("--config", help="TOML config (default: the built-in example)")
        p.add_argument("--run", help="run id")
        p.add_argument("--run-dir", help="run directory (default: <up.runs_dir>/<run>-<time>)")
        p.add_argument("--display", choices=("auto", "live", "plain", "logs"), help="terminal output")
    elif cmd == "init":
        p.description = ("Create or update the run's streams, consumers, KV and object-store buckets "
                         "(the learner does it at start; rollouts and verifiers only check them).")
        p.add_argument("--config")
        p.add_argument("--nats", help="NATS URL")
        p.add_argument("--run", help="run id")
    elif cmd == "status":
        p.description = ("Print replicas (from heartbeats, with dead letters and sandbox level), stream depths, "
                         "consumer lag, and the learner's lease, last checkpoint and any retention gap.")
        p.add_argument("--config")
        p.add_argument("--nats", help="NATS URL")
        p.add_argument("--run", help="run id")
        p.add_argument("--wait", type=float, default=3.0, help="seconds to listen for heartbeats")
        p.add_argument("--json", action="store_true", help="machine-readable output")
    elif cmd == "audit":
        from rlvr.verify.audit import add_audit_arguments

        p.description = "Score a labelled JSONL file offline and report agreement, FN and FP rates."
        add_audit_arguments(p)
    elif cmd == "eval":
        from rlvr.actors.entry_eval import add_eval_arguments

        p.description = "pass@k of a checkpoint (unbiased estimator), offline through an engine."
        add_eval_arguments(p)
    elif cmd == "report":
        p.description = "Regenerate plots and summary.json from a run's metrics.jsonl."
        p.add_argument("run_dir")
    elif cmd == "config-doc":
        p.description = "Print every config option with its type, default and meaning (Markdown)."
    return p


def main(argv: list[str] | None = None) -> int:
    _drop_working_directory_from_path()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        cmd = argv.pop(0)
        args = _command_parser(cmd).parse_args(argv)
        return _run_command(cmd, args)
    args = _role_parser().parse_args(argv)
    return _run_role(args)


def _drop_working_directory_from_path() -> None:
    # `python -m` and `-c` put the working directory first on sys.path, so a
    # .py file lying there would shadow any module a role imports later (a
    # verifier plug-in, a library). The launcher starts roles with -P where
    # Python has it; this covers every other way in.
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]


def _overrides(args: argparse.Namespace) -> dict:
    out = {}
    if getattr(args, "nats", None):
        out["nats.url"] = args.nats
    if getattr(args, "run", None):
        out["run"] = args.run
    return out


def _load(args: argparse.Namespace):
    from rlvr.actors.entry_config import ConfigError, load_config

    try:
        return load_config(getattr(args, "config", None), overrides=_overrides(args))
    except ConfigError as e:
        print(f"rlvr-actor: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def _run_role(args: argparse.Namespace) -> int:
    from rlvr.actors.lifeline import follow_up

    follow_up()  # started by `up`: stop (drain) when `up` dies, even by SIGKILL
    from rlvr.actors.config import ConfigError
    from rlvr.actors.roles import load_role_config, run_role

    try:
        cfg = load_role_config(args.role, args.config, overrides=_overrides(args))
    except ConfigError as e:
        print(f"rlvr-actor: {e}", file=sys.stderr)
        return 2

    return run_role(args.role, cfg, replica=args.replica)


def _run_command(cmd: str, args: argparse.Namespace) -> int:
    if cmd == "up":
        from rlvr.actors.launcher import up_main

        return up_main(args)
    if cmd == "init":
        from rlvr.actors.topology import init_main

        cfg = _load(args)
        return init_main(cfg.run, cfg.nats, cfg.bus)
    if cmd == "status":
        from rlvr.actors.status import status_main

        cfg = _load(args)
        return status_main(args, cfg.run, cfg.nats)
    if cmd == "audit":
        from rlvr.verify.audit import audit_main

        return audit_main(args)
    if cmd == "eval":
        from rlvr.actors.entry_eval import eval_main

        return eval_main(args)
    if cmd == "report":
        from rlvr.actors.report import report_main

        return report_main(args.run_dir)
    if cmd == "config-doc":
        from rlvr.actors.config_doc import config_doc
        from rlvr.actors.entry_config import Config

        try:
            print(config_doc(Config))
        except BrokenPipeError:  # `rlvr-actor config-doc | head`
            sys.stderr.close()
        return 0
    raise AssertionError(cmd)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
