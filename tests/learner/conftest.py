"""Fixtures of the learner tests."""

from __future__ import annotations

import pytest

from tests.learner.engine_helpers import build_tiny_qwen


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """The tiny random Qwen2 (tied embeddings) the engine tests train."""
    return build_tiny_qwen(tmp_path_factory.mktemp("tiny") / "model")
