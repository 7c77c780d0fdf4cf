"""Weight directory checks: announced files, safetensors headers, names and shapes."""

from __future__ import annotations

import hashlib

import pytest

from rlvr.protocol import WeightFile
from rlvr.rollout.weights import (
    WeightsRejectedError,
    check_weight_index,
    expected_from_checkpoint,
    read_weight_index,
    verify_weight_files,
)


def _announce(path):
    data = path.read_bytes()
    return WeightFile(name=path.name, sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))


def test_verify_accepts_the_announced_files(weight_dirs):
    f = weight_dirs["base"] / "model.safetensors"
    verify_weight_files(weight_dirs["base"], [_announce(f)])


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda wf: WeightFile(wf.name, wf.sha256, wf.bytes + 1), "partial"),
        (lambda wf: WeightFile(wf.name, "ab" * 32, wf.bytes), "sha256"),
        (lambda wf: WeightFile("other.safetensors", wf.sha256, wf.bytes), "missing"),
        (lambda wf: WeightFile("../model.safetensors", wf.sha256, wf.bytes), "plain file name"),
    ],
)
def test_verify_rejects_a_file_that_differs_from_the_announcement(weight_dirs, change, match):
    wf = _announce(weight_dirs["base"] / "model.safetensors")
    with pytest.raises(WeightsRejectedError, match=match):
        verify_weight_files(weight_dirs["base"], [change(wf)])


def test_truncated_file_is_rejected_from_its_header(weight_dirs):
    with pytest.raises(WeightsRejectedError, match="truncated"):
        read_weight_index(weight_dirs["truncated"])


def test_garbage_file_is_rejected(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(WeightsRejectedError, match="header"):
        read_weight_index(tmp_path)
    with pytest.raises(WeightsRejectedError, match="no \\*.safetensors"):
        read_weight_index(tmp_path / "..")


def test_index_must_match_the_model(tiny_model, weight_dirs):
    expected = expected_from_checkpoint(tiny_model, tied=True)
    assert "lm_head.weight" in expected
    check_weight_index(read_weight_index(weight_dirs["perturbed"]), expected, tied=True)
    with pytest.raises(WeightsRejectedError, match="lm_head.weight"):
        check_weight_index(read_weight_index(weight_dirs["no_head"]), expected, tied=True)
    smaller = dict(expected, **{"model.norm.weight": (7,)})
    with pytest.raises(WeightsRejectedError, match="shape"):
        check_weight_index(read_weight_index(weight_dirs["base"]), smaller, tied=True)
    fewer = {k: v for k, v in expected.items() if k != "model.norm.weight"}
    with pytest.raises(WeightsRejectedError, match="unknown"):
        check_weight_index(read_weight_index(weight_dirs["base"]), fewer, tied=True)
