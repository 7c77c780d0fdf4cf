"""Parsed command-line arguments as typed Structs.

Every command parses ``argv`` with argparse, then converts the namespace into
its ``Args`` Struct (``parse_into``) before any domain code runs, so the code
below a command takes typed values and can be called without a command line.
"""

from __future__ import annotations

import argparse
from typing import TypeVar

import msgspec

T = TypeVar("T")


class RunArgs(msgspec.Struct, frozen=True, kw_only=True):
    """What names a run and reaches its bus: shared by the role and the bus commands."""

    config: str | None = None
    nats: str | None = None
    run: str | None = None

    def overrides(self) -> dict[str, str]:
        """The command line's top-level config keys (checked with the file's)."""
        out = {}
        if self.nats:
            out["nats.url"] = self.nats
        if self.run:
            out["run"] = self.run
        return out


class RoleArgs(RunArgs, frozen=True, kw_only=True):
    """``rlvr-actor --role ROLE``: the role, its config and the command line's overrides."""

    role: str
    replica: str | None = None


def add_run_arguments(p: argparse.ArgumentParser, *, nats: bool = True) -> None:
    p.add_argument("--config", help="TOML config file (defaults when omitted)")
    if nats:
        p.add_argument("--nats", help="NATS URL(s), overrides [nats].url")
    p.add_argument("--run", help="run id, overrides `run`")


def parse_into(parser: argparse.ArgumentParser, argv: list[str], typ: type[T]) -> T:
    """``argv`` parsed by ``parser`` and converted to ``typ``; a value argparse
    let through but the Struct refuses is a usage error (exit 2) naming it."""
    ns = parser.parse_args(argv)
    try:
        return msgspec.convert(vars(ns), typ)
    except msgspec.ValidationError as e:
        parser.error(str(e))
        raise  # parser.error exits; this line is never reached


def load_run_config(args: RunArgs, prog: str):
    """The whole-run ``Config`` for a bus command; a bad config exits 2 naming the key."""
    import sys

    from rlvr.cli.run_config import ConfigError, load_config

    try:
        return load_config(args.config, overrides=args.overrides())
    except ConfigError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        raise SystemExit(2) from None
