"""The learner's metrics on a disk that refuses writes: training goes on, and it says so once per sink.

Found by the chaos run's ``checkpoint_disk_full`` (issue 38): TensorBoard's writer thread died of
ENOSPC, and the next ``add_scalar`` re-raised it into the learner, which exited. A file size limit
(``RLIMIT_FSIZE``, SIGXFSZ ignored: a write past it fails with EFBIG) stands in for the full disk,
in a process of its own: no root, no mount.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.conftest import REPO

SCRIPT = textwrap.dedent("""
    import json, resource, signal, sys
    from pathlib import Path
    from rlvr.learner.watch.metrics import MetricsWriter

    w = MetricsWriter(Path(sys.argv[1]))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
    step = 0
    while step < 20000 and not (w.write_failures["tensorboard"] and w.write_failures["metrics.jsonl"] > 1):
        step += 1
        w.write({"step": step, "loss": 0.5, "reward_mean": 0.25, "note": "x" * 64})
    w.close()
    print(json.dumps({"steps": step, **w.write_failures}))
""")


def test_metrics_on_a_disk_that_refuses_writes_never_stop_the_learner_and_say_so_once(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "out")], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["tensorboard"] == 1  # off after its writer died: never raised again
    assert result["metrics.jsonl"] > 1  # each later line tried, counted
    warnings = [line for line in proc.stdout.splitlines() + proc.stderr.splitlines() if "metrics_write_failed" in line]
    for sink in ("tensorboard", "metrics.jsonl"):  # once per sink (closing may say once more: its last buffer)
        assert sum(f"sink={sink}" in w for w in warnings) == 1, warnings
    assert (tmp_path / "out" / "metrics.jsonl").stat().st_size <= 4096
