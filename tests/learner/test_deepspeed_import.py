"""The learner imports DeepSpeed without what DeepSpeed's autotuner would load: MLflow, and with it
pandas and pyarrow (+141 MiB RSS and +1.4 s per learner where the ``trackers`` extra is installed;
docs/benchmarks.md, "Where the memory goes"). The learner's own MLflow tracker still imports MLflow.

Each check runs in a fresh interpreter: an import already in ``sys.modules`` would hide what it tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.util import find_spec

import pytest

pytestmark = pytest.mark.skipif(find_spec("mlflow") is None, reason="mlflow is not installed: nothing to keep out")

_ENGINE = textwrap.dedent(
    """
    import json, sys
    from rlvr.learner.engine_config import TrainEngineConfig
    from rlvr.learner.train.engine import LearnerEngine
    LearnerEngine(TrainEngineConfig(model_path=sys.argv[1], zero_stage=0), seed=0)
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("deepspeed", "mlflow", "pandas", "pyarrow"))))
    """
)


def _run(code: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    out = subprocess.run([sys.executable, "-c", code, *args], env=dict(env, OMP_NUM_THREADS="1"),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_the_learners_engine_loads_no_mlflow_pandas_or_pyarrow(model_dir):
    loaded = json.loads(_run(_ENGINE, str(model_dir)))
    assert "deepspeed" in loaded  # the engine was built: DeepSpeed is there
    assert [m for m in loaded if not m.startswith("deepspeed")] == []


def test_mlflow_is_refused_to_deepspeeds_autotuner_alone():
    code = textwrap.dedent(
        """
        import sys
        from rlvr.learner.train.engine_setup import _NoMlflowForDeepSpeedAutotuner
        sys.meta_path.insert(0, _NoMlflowForDeepSpeedAutotuner())
        try:
            exec("import mlflow", {"__name__": "deepspeed.autotuning.autotuner"})
            print("autotuner got mlflow")
        except ModuleNotFoundError:
            import mlflow  # the tracker's import, from anywhere else, while the finder is in place
            print("tracker got", mlflow.__name__)
        """
    )
    assert _run(code) == "tracker got mlflow"


def test_mlflow_imports_after_the_learner_imported_deepspeed():
    code = "from rlvr.learner.train.engine_setup import import_deepspeed\nimport_deepspeed()\nimport mlflow\nprint('ok')"
    assert _run(code) == "ok"
