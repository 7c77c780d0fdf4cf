"""What learner ranks say to each other, and the data-parallel split.

Rank 0 turns each engine operation into a ``Command`` (a tagged msgspec
Struct, msgpack on the wire) and every rank runs it through the same
``CommandRunner``, so all ranks call the same ``LearnerEngine`` methods in
the same order (they are collectives under ZeRO). ranks.py carries the
commands between processes.

Data parallelism. Rank r trains on ``items[r::W]`` of the step's batch. With
per-token losses l_t, a full-batch normaliser N (tokens for ``token-mean``,
sequences for the ``seq-mean`` modes) and the single-process loss
L = Σ_t l_t / N, rank r computes L_r = Σ_{t ∈ shard r} l_t / (N / W); DeepSpeed
averages gradients over the W ranks, so

    (1/W) Σ_r ∇L_r = (1/W) Σ_r W Σ_{t ∈ r} ∇l_t / N = Σ_t ∇l_t / N = ∇L,

the single-process gradient, however unevenly tokens fall across ranks
(normalising each shard by its own count N_r would instead weight a token by
1/(W N_r)). Gradient clipping and AdamW then see the same gradient. Every
rank also runs the same number of micro-batches (the busiest shard's; the
engine pads with empty ones), because each forward/backward is itself a
collective under ZeRO-2/3. Metrics are gathered to rank 0 and merged
(``merge_metrics``).

Not covered: moving commands between processes, timeouts and the process
groups (ranks.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from rlvr.learner.train.batching import TrainBatchItem, check_item, micro_batch_plan, sft_items
from rlvr.learner.engine_config import TrainEngineConfig


class CommandBeforeStartError(RuntimeError):
    """An engine operation was asked for before the engine was started."""


# ---- commands ------------------------------------------------------------------


class Start(msgspec.Struct, frozen=True, tag=True):
    cfg: TrainEngineConfig
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


def encode(cmd: Command) -> bytes:
    return _encoder.encode(cmd)


def decode(data: bytes) -> Command:
    return _decoder.decode(data)


# ---- data parallel split and metrics --------------------------------------------


def shard_train(items: list[TrainBatchItem], world: int, micro_batch_tokens: int, *,
                packed: bool = False) -> list[Train]:
    """One ``Train`` per rank: rank r gets ``items[r::world]``, every rank the
    global normalisers divided by ``world`` and the busiest shard's micro-batch
    count, planned as the engine will cut them (``packed``: one packed row each)."""
    for it in items:
        check_item(it)  # fail here, before any rank starts the step
    shards = [items[r::world] for r in range(world)]
    tokens = float(sum(len(it.completion_ids) for it in items))
    sequences = float(len(items))  # check_item: every completion is non-empty
    most = max(len(micro_batch_plan(s, micro_batch_tokens, packed=packed)) for s in shards)
    return [Train(s, tokens / world, sequences / world, most) for s in shards]


def shard_sft(pairs: list[tuple[list[int], list[int]]], world: int, micro_batch_tokens: int, *,
              packed: bool = False) -> list[Sft]:
    trains = shard_train(sft_items(pairs), world, micro_batch_tokens, packed=packed)
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
                from rlvr.learner.train.engine import LearnerEngine

                self.engine = LearnerEngine(cfg, seed=seed)
                return None
            case Ping() | Stop():
                return None
        engine = self.engine
        if engine is None:
            raise CommandBeforeStartError(f"{type(cmd).__name__} before Start")
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


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()  # the default group: its timeout is DeepSpeed's, for long operations


__all__ = [
    "Command", "CommandBeforeStartError", "CommandRunner", "Export", "Load", "Ping", "Save", "Sft", "Start", "Stop",
    "Train", "decode", "encode", "merge_metrics", "shard_sft", "shard_train",
]
