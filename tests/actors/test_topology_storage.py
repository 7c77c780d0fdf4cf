"""A run whose streams the server cannot reserve is refused with an error that names the stream and
the config key, not JetStream's bare 10047 (actors/topology.py, ``BusStorageError``); and ``up``
refuses a run its own server could not hold before anything starts (cli/bus_disk.py).

Real nats-server, its file store capped in its own config, and real ``rlvr-actor`` processes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rlvr.cli.bus_disk import bus_disk_shortfall
from rlvr.cli.natsserver import NatsServer
from rlvr.cli.run_config import load_config
from tests.conftest import write_config

RUN = "tight"


def _init(config: Path, url: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlvr.cli", "init", "--config", str(config), "--nats", url],
                          capture_output=True, text=True, timeout=60, cwd=cwd)


def test_a_stream_the_store_cannot_reserve_is_refused_naming_the_stream_and_the_key(tmp_path):
    config = write_config(tmp_path / "run.json", {"run": RUN, "bus": {"scored_max_bytes": 256 << 20}})
    with NatsServer(tmp_path / "nats", max_file_store="64MB") as server:
        out = _init(config, server.url, tmp_path)
    assert out.returncode != 0
    err = " ".join(out.stderr.split())
    assert f"JetStream refused to create stream RLVR_{RUN}_SCORED" in err
    assert "bus.scored_max_bytes = 268,435,456 bytes" in err and "10047" in err


def test_the_same_run_fits_once_its_reservation_does(tmp_path):
    config = write_config(tmp_path / "run.json", {"run": RUN, "bus": {"scored_max_bytes": 16 << 20,
                                                                      "dead_max_bytes": 8 << 20}})
    with NatsServer(tmp_path / "nats", max_file_store="64MB") as server:
        out = _init(config, server.url, tmp_path)
    assert out.returncode == 0, out.stderr


def test_up_refuses_a_run_its_server_could_not_hold_before_anything_starts(tmp_path):
    # 1 TiB of SCORED: more than 3/4 of any test machine's free disk
    config = write_config(tmp_path / "run.json", {"run": RUN, "bus": {"scored_max_bytes": 1 << 40}})
    out = subprocess.run([sys.executable, "-m", "rlvr.cli", "up", "--config", str(config), "--run-dir",
                          str(tmp_path / "run"), "--display", "plain"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    text = " ".join((out.stdout + out.stderr).split())
    assert "the bus cannot hold this run" in text and "bus.scored_max_bytes 1024.00 GiB" in text
    assert not (tmp_path / "run" / "nats").exists()  # no server was started
    assert not (tmp_path / "run" / "logs" / "learn-0.log").exists()


def test_stages_count_every_run_they_make_on_the_one_server(tmp_path):
    stages = [{"kind": "rl"}, {"kind": "rejection_sft", "n": 2, "prompts": 4}, {"kind": "rl"}]
    base = {"run": RUN, "stages": stages, "learn": {"engine": {"model_path": str(tmp_path / "model")},
                                                         "eval": {"prompts": 2}},
            "bus": {"scored_max_bytes": 1 << 30, "dead_max_bytes": 1 << 20}}
    cfg = load_config(write_config(tmp_path / "s.json", base))
    # 2 RL stages + rejection sampling + its measurements before and after = 5 runs
    # of 1 GiB + 1 MiB: 5.005 GiB, more than 3/4 of 6 GiB, less than 3/4 of 8 GiB
    short = bus_disk_shortfall(cfg, tmp_path / "nats", free_bytes=6 << 30)
    assert short is not None and "its 5 runs with streams of their own ([[stages]]) reserve 1.00 GiB" in short
    assert bus_disk_shortfall(cfg, tmp_path / "nats", free_bytes=8 << 30) is None
