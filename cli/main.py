"""``rlvr-actor``: the one entry point.

    rlvr-actor --role rollout|verify|learn --config run.toml [--nats URL] [--run ID]
    rlvr-actor up [--config run.toml]           # embedded NATS + every role, locally
    rlvr-actor status [--nats URL] [--run ID]   # replicas, streams, consumers
    rlvr-actor init [--config run.toml]          # create the run's streams and consumers
    rlvr-actor audit --verifier NAME --input cases.jsonl --output verdicts.jsonl
    rlvr-actor eval --checkpoint DIR --data FILE --k 1,8
    rlvr-actor report RUN_DIR
    rlvr-actor samples RUN_DIR [--step N] [--format text|html|jsonl]   # what the learner trained
    rlvr-actor autoscale --role verify --config run.toml   # verifier replicas that follow the backlog
    rlvr-actor select --from RUN_DIR --by variance --k 1 --output one.json   # one-shot RLVR
    rlvr-actor config-doc                        # every config option, from the types
    rlvr-actor plan --config run.toml [--gpus N] [--gpu-memory 80GiB]   # dry run + memory plan, starts nothing
    rlvr-actor doctor --config run.toml          # a short live check: log-prob agreement, verifier mix, speed

Thin on purpose: only argparse, msgspec and the standard library are imported
at the top, and a command's module imports what it needs inside its ``run``,
so ``--help`` is instant and ``--role verify`` never imports torch. Each
command lives in ``rlvr.cli.commands.<name>`` with a ``DESCRIPTION``, an
``add_arguments(parser)``, an ``Args`` Struct and a ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys

from rlvr.cli.args import RoleArgs, parse_into

ROLES = ("rollout", "verify", "learn")
# The command as typed -> its module under rlvr.cli.commands.
COMMANDS = {
    "up": "up", "init": "init", "status": "status", "audit": "audit", "eval": "eval", "report": "report",
    "config-doc": "config_doc", "autoscale": "autoscale", "select": "select", "samples": "samples",
    "plan": "plan", "doctor": "doctor",
}


def _role_parser() -> argparse.ArgumentParser:
    from rlvr.cli.args import add_run_arguments

    p = argparse.ArgumentParser(
        prog="rlvr-actor",
        description="Event-driven RLVR (GRPO/DAPO) over NATS JetStream. "
        f"Run one actor with --role, or a command: {', '.join(COMMANDS)} (each has --help).",
    )
    p.add_argument("--role", choices=ROLES, required=True, help="the actor to run")
    add_run_arguments(p)
    p.add_argument("--replica", help="replica id (default: <role>-<host>-<pid>)")
    return p


def main(argv: list[str] | None = None) -> int:
    _drop_working_directory_from_path()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        near = difflib.get_close_matches(argv[0], COMMANDS, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        print(f"rlvr-actor: unknown command {argv[0]!r}{hint}; the commands: {', '.join(COMMANDS)}; "
              "or run one actor with --role rollout|verify|learn", file=sys.stderr)
        return 2
    if argv and argv[0] in COMMANDS:
        name = argv.pop(0)
        command = importlib.import_module(f"rlvr.cli.commands.{COMMANDS[name]}")
        parser = argparse.ArgumentParser(prog=f"rlvr-actor {name}", description=command.DESCRIPTION)
        command.add_arguments(parser)
        return command.run(parse_into(parser, argv, command.Args))
    args = parse_into(_role_parser(), argv, RoleArgs)
    if args.role == "learn":  # before any other thread allocates: glibc fixes its arena limit then
        from rlvr.learner.train.malloc_arenas import cap_malloc_arenas

        cap_malloc_arenas()
    from rlvr.cli.cpus import pin_self_from_env

    pin_self_from_env()  # `up` gave this role its CPUs (cli/cpus.py): before torch starts a thread
    from rlvr.cli.roles import role_main  # the runtime: NATS, tracing; only once the arguments hold

    return role_main(args)


def _drop_working_directory_from_path() -> None:
    # `python -m` and `-c` put the working directory first on sys.path, so a
    # .py file lying there would shadow any module a role imports later (a
    # verifier plug-in, a library). The launcher starts roles with -P; this
    # covers every other way in.
    # A working directory the user put on PYTHONPATH (`PYTHONPATH=.`, with or without -P)
    # is theirs to keep: that is how a reward module beside the config is found.
    cwd = os.getcwd()
    asked = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    if sys.path and sys.path[0] in ("", cwd) and cwd not in asked:
        del sys.path[0]


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
