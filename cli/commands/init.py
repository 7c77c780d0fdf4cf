"""``rlvr-actor init``: create or update the run's streams, consumers, KV and object-store buckets.

The learner does the same at start (it owns the topology); rollouts and
verifiers only check it. ``init`` connects as the learner's NATS user, prints
what it touched and exits: 0 done, 3 the bus is unreachable or refuses the
credentials, 1 the server refused a stream config (its message is printed).
"""

from __future__ import annotations

import argparse
import os
import sys

from rlvr.cli.args import RunArgs, add_run_arguments, load_run_config

DESCRIPTION = ("Create or update the run's streams, consumers, KV and object-store buckets "
               "(the learner does it at start; rollouts and verifiers only check them).")


class Args(RunArgs, frozen=True, kw_only=True):
    pass


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_arguments(p)


def run(args: Args) -> int:
    import anyio

    from rlvr.actors.bus import Bus, BusConnectError
    from rlvr.actors.secrets import NatsCredentialsError, redact
    from rlvr.protocol import RunNames

    cfg = load_run_config(args, "rlvr-actor init")

    async def go() -> list[str]:
        # The topology's owner is the learner: init connects as its user.
        bus = await Bus.connect(cfg.nats.for_role("learn"), cfg.bus, RunNames(cfg.run), f"init-{os.getpid()}")
        try:
            return await bus.ensure_topology()
        finally:
            await bus.close()

    try:
        touched = anyio.run(go)
    except (BusConnectError, NatsCredentialsError) as e:
        print(f"rlvr-actor init: {redact(str(e))}", file=sys.stderr)
        return 3
    except Exception as e:  # a refused or invalid stream config: say what the server said
        print(f"rlvr-actor init: {type(e).__name__}: {redact(str(e))}", file=sys.stderr)
        return 1
    print(f"run {cfg.run}: topology ready on {redact(cfg.nats.url)}")
    for name in touched:
        print(f"  {name}")
    return 0
