"""DeepSpeed's compiled CPU op, built once per machine and environment, never waited on forever.

On the CPU accelerator DeepSpeed builds a shared-memory comm op with torch's JIT extension builder
(ninja, g++) the first time a process initialises its distributed backend, and loads it each time
after. torch marks the op's build folder with a ``lock`` file for the length of every build or load
and only the holder removes it: a learner SIGKILLed at that moment (a chaos fault, a test's kill, an
operator) leaves the file behind, and every later learner on the machine waits on it forever, with
no error. That happened on 2026-12-04: one stale lock hung a CI run's learners and every test that
started one after it.

``load_compiled_ops`` builds and loads the op under ``fcntl.flock`` on a file beside it, which the
kernel releases when its holder dies, however it dies. Under that lock no other rlvr process is
building, so a ``lock`` file found there is a dead builder's and is removed (logged). DeepSpeed then
takes the loaded op from its own cache (``OpBuilder._loaded_ops``) instead of loading it again.

The folder is per Python environment (``extensions_dir``): two virtual environments on one machine
(a clone's and a developer's) build with other include paths and would otherwise rebuild the same
folder in turn, each time a chance to be killed mid-build.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
from pathlib import Path

from rlvr.actors.logs import get_logger

log = get_logger("rlvr.learner.ops")


def extensions_dir() -> Path:
    """``~/.cache/rlvr/torch_extensions/<environment>``: one folder per interpreter prefix and torch version."""
    import torch

    key = hashlib.sha256(f"{sys.prefix}\0{torch.__version__}".encode()).hexdigest()[:12]
    return Path.home() / ".cache" / "rlvr" / "torch_extensions" / key


def load_compiled_ops() -> None:
    """Build (if needed) and load the CPU accelerator's comm op under an OS lock; nothing on other accelerators."""
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        return
    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or extensions_dir())
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".rlvr-build.flock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # released by the kernel if this process dies
        try:
            stale = root / builder.NAME / "lock"
            if stale.exists():
                log.warning("stale_build_lock_removed", path=str(stale),
                            note="left by a process that died while building or loading the op")
                stale.unlink(missing_ok=True)
            builder.load(verbose=False)
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


__all__ = ["extensions_dir", "load_compiled_ops"]
