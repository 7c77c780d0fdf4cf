"""The learner actor's handle on its DeepSpeed engine.

Every engine call runs in one worker thread (a capacity limiter of 1), so
the event loop keeps serving the bus (acks, in_progress, heartbeats) while
a step computes. This module turns scored groups into training items:
advantages are computed per group (groups may have lost failed samples, so
sizes differ), and the behaviour log-probs the rollout recorded travel with
each item for truncated importance sampling.

Alone (the usual case) each operation is a direct call on the engine. With
several ranks (a launcher set WORLD_SIZE > 1) this is rank 0's handle: each
operation goes through ``RankGroup``, which sends it to the follower ranks
and trains on rank 0's share of the batch (learner/train/ranks.py).
"""

from __future__ import annotations

import functools
import shutil
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import msgspec

from rlvr.actors.bus import Bus
from rlvr.learner.train.batching import TrainBatchItem, check_item, sample_items
from rlvr.learner.train.engine import LearnerEngine
from rlvr.learner.engine_config import TrainEngineConfig
from rlvr.learner.weights.publish import publish_weights
from rlvr.learner.weights.snapshot import (
    ExportPlan,
    Snapshot,
    SnapshotPool,
    copy_model_files,
    stale_exports,
    take_snapshot,
)
from rlvr.learner.weights.state_dict import EXPORT_DTYPES
from rlvr.learner.train.ranks import RankGroup, world_size
from rlvr.learner.train.steps import StepAligner, group_token_advantages
from rlvr.protocol import Scored

if TYPE_CHECKING:
    from rlvr.learner.weights.collective import CollectiveHost


class Trainer:
    def __init__(self, cfg: TrainEngineConfig, *, seed: int) -> None:
        self.cfg = cfg
        self.seed = seed
        self.engine: LearnerEngine | None = None  # this rank's engine (rank 0's when there are several)
        self.ranks: RankGroup | None = None  # only with several ranks
        self._limiter = anyio.CapacityLimiter(1)
        self._aligner: StepAligner | None = None  # loaded on the first step with process = "steps"
        self._snapshots = SnapshotPool()  # weights_transport = "nccl": buffers of versions done with

    async def _call(self, fn, *args, **kwargs):
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=self._limiter)

    def _engine(self) -> LearnerEngine:
        if self.engine is None:
            raise TrainerNotStartedError("Trainer.start() has not run, or close() has")
        return self.engine

    async def start(self, resume_dir: Path | None) -> None:
        if world_size() > 1:
            self.ranks = await self._call(RankGroup, self.cfg, self.seed)
            self.engine = self.ranks.engine
        else:
            self.engine = await self._call(LearnerEngine, self.cfg, seed=self.seed)
        if resume_dir is not None:
            await self.load(resume_dir)

    def items(self, groups: list[list[Scored]], counts: Counter | None = None) -> list[TrainBatchItem]:
        """One item per sample (per segment of an agent's episode: ``sample_items``): its group's
        outcome advantage, and with process rewards (``advantage.process``) its per-token advantages
        (learner/train/steps.py); with ``advantage.name = "gae"`` its reward instead."""
        counts = Counter() if counts is None else counts
        adv_cfg = self.cfg.advantage
        if adv_cfg.name == "gae":
            # PPO's critic credits each token in the engine (GAE over the reward at the last policy
            # token): an item carries its sample's reward, and no group advantage.
            return [msgspec.structs.replace(it, reward=sc.verdict.reward)
                    for group in groups for sc in group for it in sample_items(sc.sample, 0.0)]
        if adv_cfg.process == "steps" and self._aligner is None:
            self._aligner = StepAligner.for_model(self.cfg.model_path)
        out = []
        for group in groups:
            outcome, token_adv = group_token_advantages(group, adv_cfg, self._aligner, counts)
            for i, sc in enumerate(group):
                # An agent's episode with several segments trains each as its own sequence.
                out += sample_items(sc.sample, outcome[i], token_adv[i] if token_adv is not None else ())
        return out

    async def train(self, groups: list[list[Scored]]) -> dict[str, float]:
        counts: Counter = Counter()
        items = await self._call(self.items, groups, counts)  # a tokenizer may load, and decode: off the loop
        metrics = await self.train_items(items)
        return {**metrics, **{k: float(v) for k, v in counts.items()}}

    async def train_items(self, items: list[TrainBatchItem]) -> dict[str, float]:
        """One optimizer step on ``items`` (split across the ranks when there are several); its metrics."""
        for it in items:
            check_item(it)  # a malformed item fails here, before the engine starts the step
        if self.ranks is not None:
            return await self._call(self.ranks.train, items)
        return await self._call(self._engine().train_step, items)

    async def sft(self, pairs: list[tuple[list[int], list[int]]]) -> dict[str, float]:
        if self.ranks is not None:
            return await self._call(self.ranks.sft, pairs)
        return await self._call(self._engine().sft_step, pairs)

    async def save(self, directory: Path) -> None:
        if self.ranks is not None:
            return await self._call(self.ranks.save, directory, {})
        await self._call(self._engine().save_checkpoint, directory, {})

    async def load(self, directory: Path) -> None:
        if self.ranks is not None:
            return await self._call(self.ranks.load, directory)
        await self._call(self._engine().load_checkpoint, directory)

    async def export(self, directory: Path) -> list[tuple[str, str, int]]:
        """Consolidated weights as safetensors in ``directory`` (written by rank 0 only)."""
        if self.ranks is not None:
            return await self._call(self.ranks.export, directory)
        return await self._call(self._engine().export_weights, directory)

    async def close(self) -> None:
        """Stop the follower ranks (if any) and release the engine."""
        if self.ranks is not None:
            await self._call(self.ranks.close)
        elif self.engine is not None:
            await self._call(self.engine.close)
        self.engine = self.ranks = None

    async def publish(
        self, bus: Bus, weights_root: Path, version: int, step: int, transport: str, keep_every: int = 0,
        collective: CollectiveHost | None = None,
    ) -> None:
        """Publish this version's weights: the export folder and its announcement; the last two
        exports stay, and every ``keep_every``-th version when it is set.

        With ``transport = "nccl"`` the loop waits only for a copy of the weights in memory
        (``Snapshot``): the ``collective`` host hashes, announces and broadcasts it, and writes its
        export folder where something reads it, off the loop (learner/weights/collective.py)."""
        engine = self._engine()
        dtype = self.cfg.export_dtype or ("bf16" if self.cfg.bf16 else "fp32")
        plan = ExportPlan(weights_root, dtype, keep_every, None if engine.adapter else Path(self.cfg.model_path),
                          self.cfg.export_shard_bytes)
        if transport == "nccl":
            if collective is None:
                raise TrainerNotStartedError('weights_transport = "nccl" but no collective host runs')
            snapshot = await self._call(self._snapshot, version, step, plan)
            await collective.publish(snapshot)
            return
        directory = plan.directory(version)
        files = await self.export(directory)
        # A LoRA adapter's folder stays peft's own (it applies to the base model_path).
        if plan.model_dir is not None:
            copy_model_files(plan.model_dir, directory)
        await publish_weights(
            bus, directory, files, version=version, step=step, dtype=dtype,
            tied_embeddings=engine.tied_embeddings, transport=transport, adapter=engine.adapter,
        )
        for old in stale_exports(weights_root, version, keep_every):
            shutil.rmtree(old, ignore_errors=True)

    def _snapshot(self, version: int, step: int, plan: ExportPlan) -> Snapshot:
        """This version's weights copied in memory (in the engine's thread: no step runs meanwhile).
        Several ranks gather them by exporting (rank 0 writes the folder, then reads it back)."""
        engine = self._engine()
        tied = engine.tied_embeddings
        if self.ranks is not None:
            from safetensors.torch import load_file

            directory = plan.directory(version)
            files = self.ranks.export(directory)
            state = {k: v for f in sorted(directory.glob("*.safetensors")) for k, v in load_file(f).items()}
            if plan.model_dir is not None:
                copy_model_files(plan.model_dir, directory)
            return Snapshot(version, step, tied, dict(sorted(state.items())), plan, files=files)
        state = engine.full_state_dict()
        assert state is not None  # rank 0 (the only rank here) holds the whole model
        tensors = take_snapshot(state, EXPORT_DTYPES[plan.dtype], tied=tied, pool=self._snapshots)
        snapshot = Snapshot(version, step, tied, tensors, plan)
        self._snapshots.watch(snapshot)
        return snapshot


class TrainerNotStartedError(RuntimeError):
    """An engine operation before ``start`` or after ``close``."""
