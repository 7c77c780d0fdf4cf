"""Run one role in this process: logging, tracing, the actor, the exit code.

Each role's module is imported here, late, so that the verifier role never
imports torch (tests/actors/test_cli.py checks it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio

from rlvr.actors.bus import BusConnectError, default_replica_id
from rlvr.actors.config import Config
from rlvr.actors.logs import configure_logging, get_logger
from rlvr.actors.tracing import setup_tracing, shutdown_tracing


def _factory(role: str, cfg: Config):
    if role == "verify":
        from rlvr.verify.actor import VerifyActor

        return lambda: VerifyActor(cfg.verify)
    if role == "rollout":
        from rlvr.rollout.actor import RolloutActor

        return lambda: RolloutActor(cfg.rollout)
    if role == "learn":
        from rlvr.learner.actor import LearnActor

        return lambda: LearnActor(cfg.learn, seed=cfg.seed, run_dir=os.environ.get("RLVR_RUN_DIR", ""))
    raise ValueError(f"unknown role {role!r}")


def run_role(role: str, cfg: Config, replica: str | None = None) -> int:
    replica = replica or default_replica_id(role)
    obs = cfg.observability
    configure_logging(run=cfg.run, role=role, replica=replica, fmt=obs.log_format, level=obs.log_level)
    log = get_logger("rlvr")
    # Under a launcher (deepspeed, torchrun) every rank runs `--role learn`: rank 0
    # runs the learner actor, the others follow its engine commands, without NATS.
    multirank = role == "learn" and int(os.environ.get("WORLD_SIZE", "1")) > 1
    if multirank and int(os.environ.get("RANK", "0")) != 0:
        from rlvr.learner.ranks import run_follower

        return run_follower()
    if multirank:
        from rlvr.learner.ranks import lead

        lead()  # join the followers now: they wait on rank 0 from their start
    run_dir = os.environ.get("RLVR_RUN_DIR")
    trace_dir = Path(run_dir) / obs.trace_dir if run_dir and not Path(obs.trace_dir).is_absolute() else Path(obs.trace_dir)
    setup_tracing(service=role, replica=replica, run=cfg.run, exporter=obs.trace_exporter, trace_dir=trace_dir)
    from rlvr.actors.runtime import serve

    ok = False
    try:
        anyio.run(serve, cfg, replica, _factory(role, cfg))
        ok = True
    except BusConnectError as e:
        log.error("cannot_connect", error=str(e))
        return 3
    except KeyboardInterrupt:
        ok = True
        return 0
    except Exception as e:  # reported, then a non-zero exit
        log.error("actor_failed", error=_describe(e), exc_info=e)
        return 1
    finally:
        if multirank:
            from rlvr.learner.ranks import release_followers

            release_followers(ok, reason="learner done" if ok else "learner failed")
        shutdown_tracing()
        sys.stderr.flush()
    return 0


def _describe(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(_describe(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}"
