"""Run one role in this process: its config, logging, tracing, the actor, the exit code.

Each role's module is imported here, late, and a rollout or verifier process
decodes only its own section of the run config (the shared sections are
checked too; the other roles' sections are left to their roles and to `up`),
so a verifier loads no rollout or learner module at all
(tests/actors/test_role_imports.py checks a running one). The learner decodes
the whole config: it publishes the resolved config for the run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import msgspec

from rlvr.actors.bus import BusConnectError, default_replica_id
from rlvr.actors.config import ConfigError, SharedSections, convert_config, read_config
from rlvr.actors.logs import configure_logging, get_logger
from rlvr.actors.tracing import setup_tracing, shutdown_tracing
from rlvr.cli.args import RoleArgs
from rlvr.cli.cpus import usable_cpus


ROLE_SECTIONS = ("rollout", "verify", "learn")
OTHER_SECTIONS = ("up", "autoscale")


def role_main(args: RoleArgs) -> int:
    """Run the role ``args`` name; 2 on a bad config (the message names the key)."""
    from rlvr.actors.lifeline import follow_up

    follow_up()  # started by `up`: stop (drain) when `up` dies, even by SIGKILL
    try:
        cfg = load_role_config(args.role, args.config, overrides=args.overrides())
    except ConfigError as e:
        print(f"rlvr-actor: {e}", file=sys.stderr)
        return 2
    return run_role(args.role, cfg, replica=args.replica)


def load_role_config(role: str, path: str | Path | None, overrides: dict | None = None) -> SharedSections:
    """The run config as ``role`` needs it: the whole ``Config`` for the
    learner; for a rollout or verifier, the shared sections plus its own
    (typed, unknown keys refused), the other sections kept as raw tables."""
    raw, source = read_config(path, overrides)
    if role == "learn":
        from rlvr.cli.run_config import Config

        return convert_config(raw, Config, source)
    if role == "verify":
        from rlvr.verify.config import VerifyConfig as section
    elif role == "rollout":
        from rlvr.rollout.config import RolloutConfig as section
    else:
        raise ValueError(f"unknown role {role!r}")
    fields = [(role, section, section())] + [
        (other, dict, msgspec.field(default_factory=dict)) for other in ROLE_SECTIONS + OTHER_SECTIONS if other != role
    ] + [("stages", list, msgspec.field(default_factory=list))]  # `up`'s [[stages]] (rlvr.cli.stages): not a role's
    typ = msgspec.defstruct(
        f"{role.title()}RunConfig", fields, bases=(SharedSections,), frozen=True, forbid_unknown_fields=True
    )
    return convert_config(raw, typ, source)


def _factory(role: str, cfg):
    if role == "verify":
        from rlvr.verify.actor import VerifyActor

        return lambda: VerifyActor(cfg.verify)
    if role == "rollout":
        from rlvr.rollout.actor import RolloutActor

        return lambda: RolloutActor(cfg.rollout)
    if role == "learn":
        from rlvr.cli.run_config import dump_config
        from rlvr.learner.actor import LearnActor

        return lambda: LearnActor(
            cfg.learn, run=cfg.run, seed=cfg.seed, run_dir=os.environ.get("RLVR_RUN_DIR", ""), resolved_config=dump_config(cfg)
        )
    raise ValueError(f"unknown role {role!r}")


def run_role(role: str, cfg, replica: str | None = None) -> int:
    """Run ``role`` with ``cfg`` from ``load_role_config``; returns the exit code."""
    replica = replica or default_replica_id(role)
    obs = cfg.observability
    configure_logging(run=cfg.run, role=role, replica=replica, fmt=obs.log_format, level=obs.log_level)
    log = get_logger("rlvr")
    if role == "learn":  # capped by `main` before any thread (learner/train/malloc_arenas.py)
        from rlvr.learner.train.malloc_arenas import applied_cap

        log.info("malloc_arenas", cap=applied_cap(), env=os.environ.get("MALLOC_ARENA_MAX"))
    # Under a launcher (deepspeed, torchrun) every rank runs `--role learn`: rank 0
    # runs the learner actor, the others follow its engine commands, without NATS.
    multirank = role == "learn" and int(os.environ.get("WORLD_SIZE", "1")) > 1
    if multirank and int(os.environ.get("RANK", "0")) != 0:
        from rlvr.learner.train.ranks import run_follower

        return run_follower()
    if multirank:
        from rlvr.learner.train.ranks import lead

        lead()  # join the followers now: they wait on rank 0 from their start
    run_dir = os.environ.get("RLVR_RUN_DIR")
    trace_dir = Path(run_dir) / obs.trace_dir if run_dir and not Path(obs.trace_dir).is_absolute() else Path(obs.trace_dir)
    setup_tracing(service=role, replica=replica, run=cfg.run, exporter=obs.trace_exporter, trace_dir=trace_dir,
                  sample_ratio=obs.trace_sample_ratio, file_max_bytes=int(obs.trace_file_max_mb * 2**20))
    from functools import partial

    from rlvr.actors.runtime import serve

    cpus = usable_cpus()  # where `up` pinned this role (cli/cpus.py)
    log.info("config_resolved", config=msgspec.to_builtins(cfg), cpus=sorted(cpus) if cpus is not None else None)
    ok = False
    try:
        anyio.run(
            partial(serve, run=cfg.run, seed=cfg.seed, nats=cfg.nats, bus_cfg=cfg.bus, replica=replica, make_actor=_factory(role, cfg))
        )
        ok = True
    except BusConnectError as e:
        log.error("cannot_connect", error=str(e))
        return 3
    except KeyboardInterrupt:
        ok = True
        return 0
    except Exception as e:  # reported, then a non-zero exit
        log.error("actor_failed", error=_describe(e), exc_info=e)
        return _exit_code(e)
    finally:
        if multirank:
            from rlvr.learner.train.ranks import release_followers

            release_followers(ok, reason="learner done" if ok else "learner failed")
        shutdown_tracing()
        sys.stderr.flush()
    return 0


def _exit_code(e: BaseException) -> int:
    """The exit code a failure asks for (an ``exit_code`` of its own, found through task groups: 4, the
    learner's stop of a run that cannot learn), else 1."""
    if isinstance(e, BaseExceptionGroup):
        return next((c for c in map(_exit_code, e.exceptions) if c != 1), 1)
    code = getattr(e, "exit_code", None)
    return code if isinstance(code, int) and code > 0 else 1


def _describe(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(_describe(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}"
