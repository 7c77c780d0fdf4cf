"""Data-parallel learner ranks: rank 0 leads, the other ranks follow.

Under a launcher (``deepspeed`` or ``torchrun``) every rank starts
``rlvr-actor --role learn``. Rank 0 runs the learner actor: it owns the bus
and decides every engine operation. The other ranks run ``run_follower``: no
bus, no asyncio, a loop that receives a command from rank 0 and runs the same
engine method (rank_commands.py: the commands, and how a batch is split so
that W ranks compute exactly the single-process gradient). Every
``LearnerEngine`` method is collective under ZeRO, so rank 0's ``RankGroup``
sends each command first and then runs it itself, under one lock.

Commands travel with ``scatter_object_list`` over a gloo group of their own
(``new_group``: it works beside an NCCL default group, whose object
collectives would need device tensors). That group has a timeout: a follower
that hears nothing for ``RLVR_RANK_TIMEOUT_S`` seconds (default 300) logs
``leader_lost`` and exits with ``EXIT_LEADER_LOST``; a dead rank 0 closes its
sockets and is noticed at once. Rank 0 keeps an idle channel alive with
``Ping`` every quarter of the timeout from a thread of its own, so waiting
for data never looks like death. ``Stop`` ends the followers: ``RankGroup.close``
sends it, and so does ``release_followers`` when rank 0's learner role
returns or fails (exit 0 or ``EXIT_FAILED``, so the launcher sees the truth).

Only rank 0 writes exported weights and the learner's own state (the actor
runs on rank 0 alone); engine checkpoints are written by every rank, as
DeepSpeed requires, so multi-node runs need the checkpoint directory on a
shared file system.

Not covered: launching the ranks (the launcher's job, see docs/deploy.md), and
a follower stuck inside a DeepSpeed collective when rank 0 hangs mid-step
(that wait is bounded by the default group's timeout, DEEPSPEED_TIMEOUT).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from rlvr.actors.logs import get_logger
from rlvr.learner.train.batching import TrainBatchItem
from rlvr.learner.engine_config import TrainEngineConfig
from rlvr.learner.train.rank_commands import (
    Command, CommandRunner, Export, Load, Ping, Save, Sft, Start, Stop, Train, decode, encode, merge_metrics,
    shard_sft, shard_train,
)

log = get_logger("rlvr.learner.train.ranks")

TIMEOUT_ENV = "RLVR_RANK_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300.0
EXIT_FAILED = 1  # this rank's engine failed, or rank 0 stopped after a failure
EXIT_LEADER_LOST = 4  # rank 0 died or went silent for longer than the timeout


class LeaderLostError(RuntimeError):
    """A follower heard nothing from rank 0 within the timeout, or lost its connection."""


class FollowerLostError(RuntimeError):
    """Rank 0 could not reach a follower (it died or stopped listening)."""


class RanksStoppedError(RuntimeError):
    """An engine operation was asked for after the followers were stopped."""


class LeaderRankError(RuntimeError):
    """``lead()`` was called on a rank other than 0."""


# ---- process groups and the command channel --------------------------------------


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def timeout_s() -> float:
    return float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))


def _command_group(timeout: float):
    """Join the default process group (DeepSpeed's backend choice: NCCL on
    GPUs, gloo on CPU) and create the gloo group that carries commands."""
    from rlvr.learner.train.engine import ensure_dist_env

    ensure_dist_env()  # first: it imports DeepSpeed without its autotuner's MLflow (engine_setup.import_deepspeed)
    import deepspeed.comm
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator

    get_accelerator().set_device(int(os.environ["LOCAL_RANK"]))  # before NCCL picks a device
    deepspeed.comm.init_distributed(verbose=False)
    return dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout))


class Leader:
    """Rank 0's end of the command channel. Hold ``lock`` across a command
    and the engine call it stands for, so a keep-alive ``Ping`` never lands
    while the followers are inside an engine call."""

    def __init__(self, timeout: float) -> None:
        self.group = _command_group(timeout)
        self.world = world_size()
        self.timeout = timeout
        self.lock = threading.Lock()
        self._sent_at = time.monotonic()
        self._stopped = False
        self._failure: FollowerLostError | None = None
        self._wake = threading.Event()
        threading.Thread(target=self._keep_alive, name="rlvr-rank-keepalive", daemon=True).start()

    def send(self, commands: list[Command]) -> None:
        """Send ``commands[r]`` to rank r (the caller holds ``lock``)."""
        import torch.distributed as dist

        if self._stopped:
            raise RanksStoppedError("the follower ranks were stopped")
        if self._failure is not None:
            raise self._failure
        try:
            dist.scatter_object_list([None], [encode(c) for c in commands], src=0, group=self.group)
        except RuntimeError as e:  # gloo: timeout or a closed connection
            raise self._lost(e) from e
        self._sent_at = time.monotonic()

    def gather(self, value: Any) -> list[Any]:
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        try:
            dist.gather_object(value, out, dst=0, group=self.group)
        except RuntimeError as e:
            raise self._lost(e) from e
        return out

    def _lost(self, e: RuntimeError) -> FollowerLostError:
        from rlvr.learner.train.engine_setup import process_groups_failed

        process_groups_failed()  # the exit leaves the groups alone: their teardown could wait on the lost rank
        self._failure = FollowerLostError(f"a follower rank stopped answering: {e}")
        return self._failure

    def stop(self, ok: bool, reason: str = "") -> None:
        """Tell the followers to exit (once; later calls do nothing)."""
        with self.lock:
            if self._stopped:
                return
            try:
                if self._failure is None:
                    self.send([Stop(ok, reason)] * self.world)
            except FollowerLostError as e:
                log.warning("followers_unreachable_at_stop", error=str(e))
            finally:
                self._stopped = True
                self._wake.set()

    def _keep_alive(self) -> None:
        every = self.timeout / 4
        while not self._wake.wait(every / 4):
            with self.lock:
                if self._stopped or self._failure is not None:
                    return
                if time.monotonic() - self._sent_at < every:
                    continue
                try:
                    self.send([Ping()] * self.world)
                except FollowerLostError as e:
                    log.error("follower_lost", error=str(e))  # the next engine operation raises it
                    return


_leader: Leader | None = None
_leader_lock = threading.Lock()


def lead() -> Leader | None:
    """This process's command channel when it is rank 0 of several (made
    once, on first use); None when the learner runs alone."""
    global _leader
    if world_size() <= 1:
        return None
    if int(os.environ.get("RANK", "0")) != 0:
        raise LeaderRankError("only rank 0 leads; the other ranks run run_follower()")
    with _leader_lock:
        if _leader is None:
            _leader = Leader(timeout_s())
        return _leader


def release_followers(ok: bool, reason: str = "") -> None:
    """Stop the followers if this process leads any (safe to call always)."""
    if _leader is not None:
        _leader.stop(ok, reason)


class RankGroup:
    """Rank 0's handle on all learner ranks: each operation is sent to the
    followers, run here, and, for steps, its metrics merged from every rank."""

    def __init__(self, cfg: TrainEngineConfig, seed: int) -> None:
        self.cfg = cfg
        self.leader = lead()
        self.world = self.leader.world if self.leader else 1
        self.runner = CommandRunner()
        self._run([Start(cfg, seed)] * self.world)

    @property
    def engine(self):
        return self.runner.engine

    def _run(self, commands: list[Command], *, gather: bool = False) -> Any:
        if self.leader is None:
            return self.runner.run(commands[0])
        with self.leader.lock:
            self.leader.send(commands)
            result = self.runner.run(commands[0])
            return merge_metrics(self.leader.gather(result)) if gather else result

    def train(self, items: list[TrainBatchItem]) -> dict[str, float]:
        return self._run(shard_train(items, self.world, self.cfg.micro_batch_tokens, packed=self.cfg.pack_sequences),
                         gather=True)

    def sft(self, pairs: list[tuple[list[int], list[int]]]) -> dict[str, float]:
        return self._run(shard_sft(pairs, self.world, self.cfg.micro_batch_tokens, packed=self.cfg.pack_sequences),
                         gather=True)

    def save(self, directory: Path, client_state: dict) -> None:
        self._run([Save(str(Path(directory).resolve()), client_state)] * self.world)

    def load(self, directory: Path) -> dict | None:
        return self._run([Load(str(Path(directory).resolve()))] * self.world)

    def export(self, directory: Path) -> list[tuple[str, str, int]]:
        return self._run([Export(str(Path(directory).resolve()))] * self.world)

    def close(self) -> None:
        if self.leader is not None:
            self.leader.stop(ok=True, reason="closed")
        self.runner.close()


# ---- followers -------------------------------------------------------------------


class Follower:
    """A rank other than 0: runs rank 0's commands until ``Stop``."""

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout_s() if timeout is None else timeout
        self.rank = int(os.environ["RANK"])
        self.runner = CommandRunner()
        self.group = None  # the command group, joined in run()
        self.broken = False  # the ranks' process groups failed (a lost leader, a failed collective)

    def _receive(self) -> Command:
        import torch.distributed as dist

        out: list[Any] = [None]
        try:
            dist.scatter_object_list(out, None, src=0, group=self.group)
        except RuntimeError as e:
            raise LeaderLostError(str(e)) from e
        return decode(out[0])

    def _send_back(self, value: Any) -> None:
        import torch.distributed as dist

        try:
            dist.gather_object(value, None, dst=0, group=self.group)
        except RuntimeError as e:
            raise LeaderLostError(str(e)) from e

    def run(self) -> int:
        """Serve until ``Stop``; returns the process exit code."""
        try:
            self.group = _command_group(self.timeout)
            log.info("follower_start", rank=self.rank, world=world_size(), timeout_s=self.timeout)
            while True:
                cmd = self._receive()
                result = self.runner.run(cmd)
                if isinstance(cmd, (Train, Sft)):
                    self._send_back(result)
                if isinstance(cmd, Stop):
                    self.runner.close()
                    log.info("follower_done", rank=self.rank, ok=cmd.ok, reason=cmd.reason,
                             executed=dict(self.runner.executed))
                    return 0 if cmd.ok else EXIT_FAILED
        except LeaderLostError as e:
            self.broken = True
            log.error("leader_lost", rank=self.rank, timeout_s=self.timeout, error=str(e),
                      executed=dict(self.runner.executed))
            return EXIT_LEADER_LOST
        except Exception as e:
            self.broken = True
            log.error("follower_failed", rank=self.rank, error=f"{type(e).__name__}: {e}", exc_info=e,
                      executed=dict(self.runner.executed))
            return EXIT_FAILED


def run_follower() -> int:
    """Serve as a follower rank; returns the exit code, or leaves the process
    at once with it when the process groups failed: torch.distributed cannot
    be torn down after a lost peer (a timed-out gloo operation can abort the
    interpreter's exit with SIGABRT, hiding the code)."""
    follower = Follower()
    code = follower.run()
    if follower.broken:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


__all__ = [
    "EXIT_FAILED", "EXIT_LEADER_LOST", "TIMEOUT_ENV", "Follower", "FollowerLostError", "Leader", "LeaderLostError",
    "LeaderRankError", "RankGroup", "RanksStoppedError", "lead", "release_followers", "run_follower",
]
