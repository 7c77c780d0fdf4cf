"""Which exported policy folders the learner deletes after a broadcast."""

from rlvr.learner.weights.snapshot import stale_exports


def _folders(root, versions):
    for v in versions:
        (root / f"v{v}").mkdir()
    (root / "vtmp").mkdir()  # not a version: never touched


def test_only_the_last_two_exports_stay_by_default(tmp_path):
    _folders(tmp_path, range(1, 8))
    assert [p.name for p in stale_exports(tmp_path, 7)] == ["v1", "v2", "v3", "v4", "v5"]


def test_every_kth_export_is_kept_for_offline_evaluation(tmp_path):
    _folders(tmp_path, range(1, 25))
    gone = {p.name for p in stale_exports(tmp_path, 24, keep_every=10)}
    assert gone == {f"v{v}" for v in range(1, 23)} - {"v10", "v20"}
