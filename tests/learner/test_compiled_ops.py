"""DeepSpeed's compiled CPU op: a ``lock`` file left by a process killed while building or loading it
(torch's JIT builder removes it only when the holder finishes) no longer hangs the next learner."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

INIT = "from rlvr.learner.train.engine import ensure_dist_env; ensure_dist_env(); print('ready')"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_EXTENSIONS_DIR", "MASTER_PORT")}
    return dict(env, OMP_NUM_THREADS="1", **extra)


def test_a_lock_left_by_a_killed_builder_does_not_hang_the_next_learner(tmp_path):
    from rlvr.learner.train.compiled_ops import extensions_dir

    # The op as this environment builds it (built here if no learner has run on this machine yet).
    subprocess.run([sys.executable, "-c", INIT], check=True, timeout=900, env=_env(), capture_output=True)
    ext = tmp_path / "ext"
    shutil.copytree(extensions_dir(), ext)
    lock = ext / "deepspeed_shm_comm" / "lock"
    lock.touch()  # what a learner SIGKILLed mid-build leaves
    out = subprocess.run([sys.executable, "-c", INIT], timeout=300, env=_env(TORCH_EXTENSIONS_DIR=str(ext)),
                         capture_output=True, text=True)
    assert out.returncode == 0 and "ready" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    assert not lock.exists()
    assert "stale_build_lock_removed" in out.stdout + out.stderr
