"""A process that built the learner's engine destroys torch.distributed's groups at exit, while the
interpreter is whole. Left to the interpreter's finalization, gloo's threads now and then abort the
exit with "terminate called without an active exception" (SIGABRT), and a learner that trained to the
end reports -6 (learner/train/engine_setup.py, ``_destroy_process_groups``).

Each check runs in a fresh interpreter. Its first ``atexit`` hook runs last (hooks run in reverse
order), after the engine's, and reports whether the default group is still up; a group still up is
torn down there, so the check never depends on how finalization goes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

_PROBE = textwrap.dedent(
    """
    import atexit, sys
    import torch.distributed as dist

    def probe():
        print("group up at exit:", dist.is_initialized(), flush=True)
        if dist.is_initialized():  # left up on purpose ("failed"): torn down here, so the exit stays clean
            dist.destroy_process_group()

    atexit.register(probe)
    from rlvr.learner.engine_config import TrainEngineConfig
    from rlvr.learner.train.engine import LearnerEngine
    from rlvr.learner.train.engine_setup import process_groups_failed
    LearnerEngine(TrainEngineConfig(model_path=sys.argv[1], zero_stage=0), seed=0)
    print("group up after the engine:", dist.is_initialized(), flush=True)
    if sys.argv[2] == "failed":
        process_groups_failed()
    """
)


def _run(model_dir, mode: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    out = subprocess.run([sys.executable, "-c", _PROBE, str(model_dir), mode], env=dict(env, OMP_NUM_THREADS="1"),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return [line for line in out.stdout.splitlines() if line.startswith("group up")]


def test_a_process_that_built_an_engine_destroys_its_process_group_before_the_interpreter_finalizes(model_dir):
    assert _run(model_dir, "ok") == ["group up after the engine: True", "group up at exit: False"]


def test_groups_marked_failed_are_left_alone_at_exit(model_dir):
    # a teardown after a lost peer could wait on it: the exit must not
    assert _run(model_dir, "failed") == ["group up after the engine: True", "group up at exit: True"]
