"""What the learner's engine is set up with, apart from the engine itself: the process environment
DeepSpeed needs (DeepSpeed imported without its autotuner's MLflow), the learning-rate schedule, the
DeepSpeed config, RNG states for checkpoints, and the token-weighted sums of per-micro-batch metrics."""

from __future__ import annotations

import atexit
import importlib.abc
import math
from dataclasses import dataclass
import os
import random
import socket
import sys
import threading

import numpy as np
import torch

from rlvr.learner.engine_config import ConstantSchedule, CosineSchedule, Schedule, TrainEngineConfig


def ensure_dist_env() -> None:
    """Single-process defaults for what torch.distributed's env:// init needs.

    DeepSpeed (0.19) wants RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
    MASTER_PORT even with one process; without them it tries MPI discovery.
    Its launcher sets them for multi-process runs. The compiled op (the CPU
    accelerator's shared-memory comm op) is built once per machine and Python
    environment in TORCH_EXTENSIONS_DIR and loaded here, under an OS lock
    that a killed process cannot leave behind (``compiled_ops``).
    """
    from rlvr.learner.train.compiled_ops import extensions_dir, load_compiled_ops

    import_deepspeed()
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir()))
    for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    load_compiled_ops()
    global _teardown_registered
    if not _teardown_registered:
        atexit.register(_destroy_process_groups)
        _teardown_registered = True


_teardown_registered = False
_groups_failed = False


def process_groups_failed() -> None:
    """Mark this process's groups as failed (a lost peer, a timed-out collective): the exit
    teardown then leaves them alone, as tearing down a group whose peer is gone can hang."""
    global _groups_failed
    _groups_failed = True


def _destroy_process_groups() -> None:
    """Destroy torch.distributed's groups while the interpreter is still whole (an ``atexit``
    hook). Left to the interpreter's finalization, gloo's worker threads can still hold work that
    references Python objects, and the process now and then aborts at exit with "terminate called
    without an active exception" (SIGABRT): a learner that trained to the end would report -6
    (pytorch/pytorch#190489; torch documents ``destroy_process_group`` as every trainer's last call)."""
    if _groups_failed or not torch.distributed.is_initialized():
        return
    # In a thread, waited on for a bounded time: a collective still in flight (a role that failed
    # mid-step) could hold the teardown, and an exit must never hang. Past the bound the exit goes
    # on as it would have without the hook.
    worker = threading.Thread(target=torch.distributed.destroy_process_group, name="rlvr-pg-teardown", daemon=True)
    worker.start()
    worker.join(_TEARDOWN_WAIT_S)


_TEARDOWN_WAIT_S = 30.0


class _NoMlflowForDeepSpeedAutotuner(importlib.abc.MetaPathFinder):
    """Refuses ``import mlflow`` to DeepSpeed's autotuner module alone.

    ``import deepspeed`` imports its autotuner, whose ``try: import mlflow`` only serves to log
    autotuning runs, which the learner never starts. Where MLflow is installed (the ``trackers``
    extra), that one line loaded MLflow, pandas and pyarrow into every learner: +141 MiB RSS, 72 MiB of
    it anonymous, 1,180 modules, +1.4 s of import (docs/benchmarks.md, "Where the memory goes"). The import is
    refused by looking at who imports, not by hiding ``mlflow`` from the process: the learner's own
    MLflow tracker (learner/watch/sinks.py) imports it on another thread, maybe at the same moment."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "mlflow" and not fullname.startswith("mlflow."):
            return None
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_globals.get("__name__") == "deepspeed.autotuning.autotuner":
                raise ModuleNotFoundError(f"{fullname} is not loaded for DeepSpeed's autotuner (the learner never "
                                          "autotunes)", name=fullname)
            frame = frame.f_back
        return None


def import_deepspeed() -> None:
    """Import DeepSpeed once, without what its autotuner would load (``_NoMlflowForDeepSpeedAutotuner``)."""
    if "deepspeed" in sys.modules:
        return
    finder = _NoMlflowForDeepSpeedAutotuner()
    sys.meta_path.insert(0, finder)
    try:
        import deepspeed  # noqa: F401
    finally:
        sys.meta_path.remove(finder)


def lr_factor(step: int, schedule: Schedule) -> float:
    """LR multiplier for optimizer step ``step`` (0-based): linear warm-up to 1,
    then constant or cosine decay to ``min_lr_ratio``."""
    if step < schedule.warmup_steps:
        return (step + 1) / schedule.warmup_steps
    if isinstance(schedule, ConstantSchedule):
        return 1.0
    assert isinstance(schedule, CosineSchedule)
    progress = min(1.0, (step - schedule.warmup_steps) / max(1, schedule.total_steps - schedule.warmup_steps))
    return schedule.min_lr_ratio + (1 - schedule.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def deepspeed_config(cfg: TrainEngineConfig) -> dict:
    """The DeepSpeed JSON config. Gradient accumulation is unmanaged: the
    engine decides how many micro-batches a step has, and each ``step()``
    call is the accumulation boundary."""
    zero: dict = {"stage": cfg.zero_stage}
    if cfg.zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    if cfg.offload_optimizer and cfg.zero_stage >= 1:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    return {
        "train_micro_batch_size_per_gpu": 1,  # nominal: micro-batches are packed by tokens
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "zero_optimization": zero,
        "bf16": {"enabled": cfg.bf16},
        "gradient_clipping": cfg.grad_clip or 0.0,
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,  # keep torch.optim.AdamW when offloading
        "steps_per_print": 1 << 62,
        "wall_clock_breakdown": False,
    }


def rng_states() -> dict:
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


class _Metrics:
    """Token-weighted means of per-micro-batch metrics; ``*_max`` keys take the max."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.tokens = 0.0

    def add(self, metrics: dict[str, float]) -> None:
        n = metrics.get("tokens", 0.0)
        self.tokens += n
        for key, value in metrics.items():
            if key == "tokens":
                continue
            if key.endswith("_max"):
                self.sums[key] = max(self.sums.get(key, -math.inf), value)
            else:
                self.sums[key] = self.sums.get(key, 0.0) + value * n

    def result(self) -> dict[str, float]:
        return {k: v if k.endswith("_max") else v / max(self.tokens, 1.0) for k, v in self.sums.items()}


def _all_sum(t: torch.Tensor) -> torch.Tensor:
    """``t`` summed over the data-parallel ranks, in place (itself on one rank)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized() \
            and torch.distributed.get_world_size() > 1:
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
    return t


@dataclass(frozen=True)
class _Gae:
    """A PPO step's per-micro-batch tensors from the pass before the first epoch ([B, T-1] each)."""

    old_logprobs: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]  # V_old
    advantages: tuple[torch.Tensor, ...]  # GAE, whitened when advantage.whiten
    returns: tuple[torch.Tensor, ...]  # the value targets
    metrics: dict[str, float]  # explained variance, value, return and raw advantage means


__all__ = ["_Gae", "_Metrics", "_all_sum", "deepspeed_config", "ensure_dist_env", "import_deepspeed", "lr_factor",
           "process_groups_failed", "rng_states", "set_rng_states"]
