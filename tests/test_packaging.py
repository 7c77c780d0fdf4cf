"""Packaging: the top-level folders install under `rlvr` and nowhere else."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import REPO

ROOTS = ("protocol", "actors", "sandbox", "rollout", "verify", "learner", "cli")


def test_every_package_folder_is_listed_by_setup():
    sys.path.insert(0, str(REPO))
    try:
        import importlib

        setup_text = (REPO / "setup.py").read_text()
        namespace: dict = {"__file__": str(REPO / "setup.py")}
        exec(compile(setup_text.replace("setup(", "_unused = dict("), "setup.py", "exec"), namespace)
        listed = set(namespace["_packages"]())
    finally:
        sys.path.remove(str(REPO))
        del importlib
    on_disk = {
        "rlvr." + str(p.parent.relative_to(REPO)).replace("/", ".")
        for root in ROOTS
        for p in (REPO / root).rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert on_disk == listed


def test_wheel_holds_only_the_rlvr_namespace(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(REPO)],
        check=True,
    )
    wheel = next(tmp_path.glob("rlvr_actor-*.whl"))
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert tops == {"rlvr", next(t for t in tops if t.endswith(".dist-info"))}
    names = zipfile.ZipFile(wheel).namelist()
    assert "rlvr/protocol/codec.py" in names and "rlvr/cli/builtin.toml" in names
    assert not any(n.startswith("rlvr/__init__.py") for n in names)  # a namespace package


def test_installed_console_script_exists():
    assert (Path(sys.executable).parent / "rlvr-actor").exists()


def test_every_module_the_suite_marks_slow_exists():
    from tests.conftest import SLOW_MODULES

    missing = sorted(m for m in SLOW_MODULES if not (REPO / m).is_file())
    assert missing == [], f"moved or removed: mark their new paths slow in tests/conftest.py: {missing}"
