"""`up`'s CPU split (cli/cpus.py): the learner's CPUs to itself, the rest shared, and the pins hold
in real processes (a Python child pins itself from RLVR_CPUS; every thread of a real nats-server)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.cli.cpus import CPUS_ENV, CpuSplit, parse_cpus, pin_self_from_env, split_cpus
from rlvr.cli.natsserver import NatsServer
from tests.conftest import REPO


def test_the_learner_gets_the_last_cpus_and_every_other_process_the_rest():
    assert split_cpus(1, True, frozenset({0, 1})) == CpuSplit(learner=frozenset({1}), others=frozenset({0}))
    # A cpuset with gaps (a container's): the last ones by number, whatever they are.
    split = split_cpus(2, True, frozenset({0, 2, 5, 7}))
    assert split == CpuSplit(learner=frozenset({5, 7}), others=frozenset({0, 2}))
    assert split.env("learn") == {CPUS_ENV: "5,7"} and split.env("rollout") == {CPUS_ENV: "0,2"}
    assert split.describe() == "learner on CPU 5,7, every other process on CPU 0,2"


@pytest.mark.parametrize(("threads", "enabled", "usable"), [
    (1, False, frozenset({0, 1})),  # up.pin_learner = false
    (0, True, frozenset({0, 1})),  # learner_threads unset: no size for the learner's side
    (2, True, frozenset({0, 1})),  # the others would have no CPU
    (1, True, frozenset({0})),
    (1, True, None),  # no sched_getaffinity here
])
def test_nothing_is_pinned_when_a_side_would_have_no_cpu_or_pinning_is_off(threads, enabled, usable):
    assert split_cpus(threads, enabled, usable) is None


@pytest.mark.parametrize("text", ["", "a,b", "0-3", "-1"])
def test_a_malformed_cpu_list_is_an_error_that_names_the_variable(text):
    with pytest.raises(ValueError, match=CPUS_ENV):
        parse_cpus(text)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU affinity is Linux's")
def test_a_cpu_list_this_process_may_not_use_is_an_error_that_names_the_variable_and_the_cpus_it_may(monkeypatch):
    before = os.sched_getaffinity(0)
    monkeypatch.setenv(CPUS_ENV, "100000")  # no such CPU
    with pytest.raises(ValueError, match=rf"{CPUS_ENV}='100000': this process may not run there .*it may run on CPU"):
        pin_self_from_env()
    assert os.sched_getaffinity(0) == before


def _affinity_of_every_thread(pid: int) -> list[set[int]]:
    return [os.sched_getaffinity(int(t.name)) for t in Path(f"/proc/{pid}/task").iterdir()]


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU affinity is Linux's")
def test_a_role_child_pins_itself_before_it_starts_a_thread():
    one = sorted(os.sched_getaffinity(0))[-1]
    code = ("from rlvr.cli.cpus import pin_self_from_env; pin_self_from_env(); "
            "import os, threading; t = threading.Thread(target=lambda: print(sorted(os.sched_getaffinity(0))));"
            "t.start(); t.join(); print(sorted(os.sched_getaffinity(0)))")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **{CPUS_ENV: str(one)}),
                         capture_output=True, text=True, timeout=120, cwd=REPO, check=True)
    assert out.stdout.split("\n")[:2] == [f"[{one}]", f"[{one}]"]  # the thread it started, and itself


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU affinity is Linux's")
def test_every_thread_of_nats_server_is_pinned_and_go_is_told_how_many_cpus(tmp_path):
    one = frozenset(sorted(os.sched_getaffinity(0))[:1])
    with NatsServer(tmp_path / "nats", cpus=one) as server:
        assert server.proc is not None
        affinities = _affinity_of_every_thread(server.proc.pid)
        environ = Path(f"/proc/{server.proc.pid}/environ").read_bytes().split(b"\0")
    assert len(affinities) > 1 and all(a == set(one) for a in affinities)  # Go's threads, not just its first
    assert b"GOMAXPROCS=1" in environ
