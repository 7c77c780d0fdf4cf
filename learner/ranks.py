"""Data-parallel learner ranks: rank 0 leads, the other ranks follow.

Under a launcher (``deepspeed`` or ``torchrun``) every rank starts
``rlvr-actor --role learn``. Rank 0 runs the learner actor: it owns the bus
and decides every engine operation. The other ranks run ``run_follower``: no
bus, no asyncio, just a loop that receives a command from rank 0 and runs the
same engine method. Every ``LearnerEngine`` method is collective under ZeRO
(a forward pass under ZeRO-3, a backward under ZeRO-2/3, a step, a
checkpoint, an export), so all ranks must call them in the same order: rank
0's ``RankGroup`` sends the command first and then runs it itself, under one
lock, and both sides run commands through the same ``CommandRunner``.

Commands are msgspec Structs (one tagged union, msgpack on the wire), sent
with ``scatter_object_list`` over a gloo group of their own (``new_group``:
works beside an NCCL default group, whose object collectives would need
device tensors). That group has a timeout: a follower that hears nothing for
``RLVR_RANK_TIMEOUT_S`` seconds (default 300) logs ``leader_lost`` and exits
with ``EXIT_LEADER_LOST``; a dead rank 0 closes its sockets and is noticed at
once. Rank 0 keeps an idle channel alive with ``Ping`` every quarter of the
timeout from a thread of its own, so waiting for data never looks like death.
``Stop`` ends the followers: ``RankGroup.close`` sends it, and so does
``release_followers`` when rank 0's learner role returns or fails.

Data parallelism. Rank r trains on ``items[r::W]`` of the step's batch. With
per-token losses l_t, a full-batch normaliser N (tokens for ``token-mean``,
sequences for the ``seq-mean`` modes) and the single-process loss
L = Σ_t l_t / N, rank r computes L_r = Σ_{t ∈ shard r} l_t / (N / W); DeepSpeed
averages gradients over the W ranks, so

    (1/W) Σ_r ∇L_r = (1/W) Σ_r W Σ_{t ∈ r} ∇l_t / N = Σ_t ∇l_t / N = ∇L,

the single-process gradient, however unevenly tokens fall across ranks
(normalising each shard by its own count would instead weight a token by
1/(W N_r)). Clipping and AdamW then see the same gradient. Every rank also
runs the same number of micro-batches (the busiest shard's; the engine pads
with empty ones), because each forward/backward is itself a collective.
Metrics are gathered to rank 0 and merged (``merge_metrics``).

Only rank 0 writes exported weights and the learner's own state (the actor
runs on rank 0 alone); engine checkpoints are written by every rank, as
DeepSpeed requires, so multi-node runs need the checkpoint directory on a
shared file system.

Not covered: launching the ranks (the launcher's job, see the README), and
a follower stuck inside a DeepSpeed collective when rank 0 hangs mid-step
(that wait is bounded by the default group's timeout, DEEPSPEED_TIMEOUT).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec

from rlvr.actors.logs import get_logger
from rlvr.learner.batching import TrainBatchItem, check_item, pack_by_tokens, sft_items
from rlvr.learner.engine_config import EngineConfig

log = get_logger("rlvr.learner.ranks")

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


# ---- commands ------------------------------------------------------------------


class Start(msgspec.Struct, frozen=True, tag=True):
    cfg: EngineConfig
    seed: int


class Train(msgspec.Struct, frozen=True, tag=True):
    items: list[TrainBatchItem]  # this rank's share
    num_tokens: float  # N / W: see the module docstring
    num_sequences: float  # S / W
    min_micro_batches: int


class Sft(msgspec.Struct, frozen=True, tag=True):
    pairs: list[tuple[list[int], list[int]]]
    num_tokens: float
    min_micro_batches: int


class Save(msgspec.Struct, frozen=True, tag=True):
    directory: str
    client_state: dict[str, Any] = {}


class Load(msgspec.Struct, frozen=True, tag=True):
    directory: str


class Export(msgspec.Struct, frozen=True, tag=True):
    directory: str


class Ping(msgspec.Struct, frozen=True, tag=True):
    pass


class Stop(msgspec.Struct, frozen=True, tag=True):
    ok: bool
    reason: str = ""


Command = Start | Train | Sft | Save | Load | Export | Ping | Stop
_decoder = msgspec.msgpack.Decoder(Command)
_encoder = msgspec.msgpack.Encoder()


# ---- data parallel split and metrics --------------------------------------------


def shard_train(items: list[TrainBatchItem], world: int, micro_batch_tokens: int) -> list[Train]:
    """One ``Train`` per rank: rank r gets ``items[r::world]``, every rank the
    global normalisers divided by ``world`` and the busiest shard's micro-batch count."""
    for it in items:
        check_item(it)  # fail here, before any rank starts the step
    shards = [items[r::world] for r in range(world)]
    tokens = float(sum(len(it.completion_ids) for it in items))
    sequences = float(len(items))  # check_item: every completion is non-empty
    most = max(len(pack_by_tokens([len(it.prompt_ids) + len(it.completion_ids) for it in s], micro_batch_tokens))
               for s in shards)
    return [Train(s, tokens / world, sequences / world, most) for s in shards]


def shard_sft(pairs: list[tuple[list[int], list[int]]], world: int, micro_batch_tokens: int) -> list[Sft]:
    trains = shard_train(sft_items(pairs), world, micro_batch_tokens)
    return [Sft(pairs[r::world], t.num_tokens, t.min_micro_batches) for r, t in enumerate(trains)]


_SUMMED = ("samples", "micro_batches", "tokens", "response_tokens")
_FROM_RANK0 = ("step", "lr", "grad_norm")  # the same on every rank (grad_norm: DeepSpeed's global norm)


def merge_metrics(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """One step's metrics from every rank's own, rank 0 first.

    ``loss``: each rank's is W Σ_{t ∈ r} l_t / N, so the batch loss is their
    sum over W. Counts add up; the step took as long as the slowest rank;
    ``*_max`` keys take the max; other keys are token means, weighted by each
    rank's ``response_tokens`` (a rank with an empty share has none).
    """
    world = len(per_rank)
    out = dict(per_rank[0])
    out["loss"] = sum(m["loss"] for m in per_rank) / world
    for key in _SUMMED:
        if key in out:
            out[key] = float(sum(m.get(key, 0.0) for m in per_rank))
    if "step_time_s" in out:
        out["step_time_s"] = max(m["step_time_s"] for m in per_rank)
        out["tokens_per_s"] = out["tokens"] / max(out["step_time_s"], 1e-9)
    weight = sum(m.get("response_tokens", 0.0) for m in per_rank)
    keys = {k for m in per_rank for k in m} - {"loss", "step_time_s", "tokens_per_s", *_SUMMED, *_FROM_RANK0}
    for key in keys:
        values = [(m[key], m.get("response_tokens", 0.0)) for m in per_rank if key in m]
        if key.endswith("_max"):
            out[key] = max(v for v, _ in values)
        elif weight > 0:
            out[key] = sum(v * w for v, w in values) / weight
    return out


# ---- running commands ------------------------------------------------------------


class CommandRunner:
    """The engine method each command stands for. Rank 0 and the followers
    both run commands through here, so they make the same calls."""

    def __init__(self) -> None:
        self.engine = None  # a LearnerEngine after Start
        self.executed: Counter[str] = Counter()

    def run(self, cmd: Command) -> Any:
        self.executed[type(cmd).__name__] += 1
        match cmd:
            case Start(cfg=cfg, seed=seed):
                from rlvr.learner.engine import LearnerEngine

                self.engine = LearnerEngine(cfg, seed=seed)
                return None
            case Ping() | Stop():
                return None
        engine = self.engine
        if engine is None:
            raise RanksStoppedError(f"{type(cmd).__name__} before Start")
        match cmd:
            case Train():
                return engine.train_step(cmd.items, num_tokens=cmd.num_tokens, num_sequences=cmd.num_sequences,
                                         min_micro_batches=cmd.min_micro_batches)
            case Sft():
                return engine.sft_step(cmd.pairs, num_tokens=cmd.num_tokens, min_micro_batches=cmd.min_micro_batches)
            case Save():
                return engine.save_checkpoint(Path(cmd.directory), cmd.client_state)
            case Load():
                return engine.load_checkpoint(Path(cmd.directory))
            case Export():
                files = engine.export_weights(Path(cmd.directory))
                # Rank 0 writes the files alone; without this wait the followers would sit
                # on the command channel meanwhile, and a large export outlasts its timeout.
                _barrier()
                return files
        raise AssertionError(cmd)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None


# ---- process groups and the command channel --------------------------------------


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()  # the default group: its timeout is DeepSpeed's, for long operations


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def timeout_s() -> float:
    return float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))


def _command_group(timeout: float):
    """Join the default process group (DeepSpeed's backend choice: NCCL on
    GPUs, gloo on CPU) and create the gloo group that carries commands."""
    import deepspeed.comm
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator

    from rlvr.learner.engine import ensure_dist_env

    ensure_dist_env()
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
            dist.scatter_object_list([None], [_encoder.encode(c) for c in commands], src=0, group=self.group)
        except RuntimeError as e:  # gloo: timeout or a closed connection
            self._failure = FollowerLostError(f"a follower rank stopped answering: {e}")
            raise self._failure from e
        self._sent_at = time.monotonic()

    def gather(self, value: Any) -> list[Any]:
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        try:
            dist.gather_object(value, out, dst=0, group=self.group)
        except RuntimeError as e:
            self._failure = FollowerLostError(f"a follower rank stopped answering: {e}")
            raise self._failure from e
        return out

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
        raise RuntimeError("only rank 0 leads; the other ranks run run_follower()")
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

    def __init__(self, cfg: EngineConfig, seed: int) -> None:
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
        return self._run(shard_train(items, self.world, self.cfg.micro_batch_tokens), gather=True)

    def sft(self, pairs: list[tuple[list[int], list[int]]]) -> dict[str, float]:
        return self._run(shard_sft(pairs, self.world, self.cfg.micro_batch_tokens), gather=True)

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

    def _receive(self) -> Command:
        import torch.distributed as dist

        out: list[Any] = [None]
        try:
            dist.scatter_object_list(out, None, src=0, group=self.group)
        except RuntimeError as e:
            raise LeaderLostError(str(e)) from e
        return _decoder.decode(out[0])

    def _send_back(self, value: Any) -> None:
        import torch.distributed as dist

        try:
            dist.gather_object(value, None, dst=0, group=self.group)
        except RuntimeError as e:
            raise LeaderLostError(str(e)) from e

    def run(self) -> int:
        """Serve until ``Stop``; returns the process exit code."""
        self.group = _command_group(self.timeout)
        log.info("follower_start", rank=self.rank, world=world_size(), timeout_s=self.timeout)
        try:
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
            log.error("leader_lost", rank=self.rank, timeout_s=self.timeout, error=str(e),
                      executed=dict(self.runner.executed))
            return EXIT_LEADER_LOST
        except Exception as e:
            log.error("follower_failed", rank=self.rank, error=f"{type(e).__name__}: {e}", exc_info=e,
                      executed=dict(self.runner.executed))
            return EXIT_FAILED


def run_follower() -> int:
    return Follower().run()


__all__ = [
    "EXIT_FAILED", "EXIT_LEADER_LOST", "TIMEOUT_ENV", "Command", "CommandRunner", "Follower", "FollowerLostError",
    "Leader", "LeaderLostError", "RankGroup", "RanksStoppedError", "lead", "merge_metrics", "release_followers",
    "run_follower", "shard_sft", "shard_train",
]
