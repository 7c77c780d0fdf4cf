"""Every config under examples/ loads, validates, and names verifiers that resolve.

Model folders in the examples (/models/..., models/...) need not exist here:
loading checks the types and bounds, not the files. The first training task
of each builtin dataset (the repository's data/) is built and its
verifier spec resolved with typed parameters, so a composite spec with a bad
part or parameter fails here, not in a verifier replica at run time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.cli.run_config import load_config
from rlvr.learner.config import BuiltinDataset
from rlvr.learner.data.datasets import fill_spec, load_splits, builtin_data_root
from rlvr.protocol import VerifierSpec
from rlvr.verify.registry import load_plugins, resolve

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CONFIGS = sorted(EXAMPLES.glob("*.toml"))


def test_the_examples_promised_by_the_readme_exist():
    names = {p.stem for p in CONFIGS}
    assert {"gsm8k", "math", "code", "gpu_qwen", "smollm2"} <= names
    readme = (EXAMPLES / "README.md").read_text()
    for p in CONFIGS:
        assert p.name in readme, f"examples/README.md does not describe {p.name}"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_loads_and_validates(path):
    cfg = load_config(path)
    text = path.read_text()
    assert text.startswith("#"), "every example opens with a comment saying what it is"
    assert sum(line.lstrip().startswith("#") for line in text.splitlines()) >= 15, "examples explain their choices"
    assert cfg.learn.engine is not None, "an example trains a model"
    assert cfg.learn.engine.temperature == cfg.learn.sampling.temperature
    assert cfg.verify.sandbox.limits.wall_s < cfg.verify.timeout_s
    template = getattr(cfg.learn.dataset, "verifier", None)
    if isinstance(template, VerifierSpec):
        bound = resolve(fill_spec(template, gold="42", tests={"entry_point": "f", "asserts": ["assert f() == 1"]}))
        assert bound.name == template.name


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_dataset_builds_tasks_with_resolvable_verifiers(path, monkeypatch):
    cfg = load_config(path)
    # An example's own plug-ins live beside it (examples/<name>/), importable as its README says.
    monkeypatch.syspath_prepend(str(EXAMPLES / path.stem))
    load_plugins(cfg.verify.plugins)
    ds = cfg.learn.dataset
    if isinstance(ds, BuiltinDataset):
        assert builtin_data_root(ds.root).is_dir(), "the builtin sets ship in the repository's data/"
    splits = load_splits(ds, seed=cfg.seed)
    assert len(splits.heldout) >= cfg.learn.eval.prompts
    for task in (splits.train[0], splits.heldout[0]):
        resolve(task.verifier)
