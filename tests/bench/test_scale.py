"""bench/scale: the cluster's configs come from the shipped ones, a window of readings turns into the rates
the report prints, the report names what broke first, and (slow) the whole bench on a tiny ladder: a
real 3-node cluster, the real roles, one level.

Not a timed test: the figures are what `python -m bench.scale` measures, by hand (bench/results/scale.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.scale.cluster import node_conf
from bench.scale.fleet import Shape, run_config
from bench.scale.meter import unix, window
from bench.scale.report import diagnose, write
from rlvr.cli.run_config import Config

REPO = Path(__file__).resolve().parents[2]
NODES = ("rlvr-nats-1", "rlvr-nats-2", "rlvr-nats-3")


def test_each_node_runs_the_shipped_config_on_its_own_ports_and_store(tmp_path):
    shipped = (REPO / "ops/nats/cluster/n2.conf").read_text()
    text = node_conf(2, tmp_path / "store2", [7001, 7002, 7003], tmp_path / "n2.conf", 2048).read_text()
    for kept in ("server_name: rlvr-nats-2", "max_payload: 8MB", "max_pending: 256MB", 'write_deadline: "30s"',
                 "name: rlvr", "max_memory_store: 1GB"):
        assert kept in shipped and kept in text
    assert "listen: 127.0.0.1:7002" in text
    assert all(f"nats://127.0.0.1:{p}" in text for p in (7001, 7002, 7003))
    assert f"store_dir: {tmp_path / 'store2'}" in text and "max_file_store: 2048MB" in text
    settings = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert "nats://nats-" not in settings and "0.0.0.0" not in settings and "http:" not in settings


def test_the_run_config_is_a_valid_config_of_every_role():
    import msgspec

    cfg = msgspec.convert(run_config(Shape(), max_rollouts=16), Config)
    assert cfg.bus.replicas == 3 and cfg.bus.storage == "file"
    assert cfg.learn.engine is None  # the dry learner
    assert cfg.learn.group_size == 16 and cfg.learn.sampling.max_tokens == 32_768
    assert cfg.learn.max_inflight_tasks >= 2 * 16 * Shape().rollout_inflight
    assert cfg.rollout.engine.lengths.tokens_per_s == Shape().tokens_per_s
    assert cfg.learn.dataset.verifier.name == "exact"


def test_jetstream_timestamps_read_to_the_microsecond():
    assert unix("2026-12-06T21:21:34.123456789Z") == pytest.approx(1796592094.123457, abs=1e-6)
    assert unix("2026-12-06T21:21:34Z") == pytest.approx(1796592094.0)


def _reading(t, *, seqs, held, cpu, conns, dead=0, busy=(0, 0)):
    streams = {k: {"last_seq": seqs[k], "messages": held[k][0], "bytes": held[k][1], "leader": "rlvr-nats-1"}
               for k in seqs}
    consumers = {k: {"pending": 0, "ack_pending": 0, "redelivered": 0, "delivered_seq": seqs[k],
                     "delivered_at": t} for k in seqs}
    node = {"in_bytes": 0, "out_bytes": 0, "in_msgs": 0, "out_msgs": 0, "mem": 1, "slow_consumers": 0}
    return {"t": t, "streams": streams, "consumers": consumers, "cpu": cpu, "dead_seq": dead,
            "written": dict.fromkeys(NODES, 0), "varz": dict.fromkeys(NODES, node), "conns": conns,
            "store": dict.fromkeys(NODES, 0), "hb": {}, "mem_available": 1 << 34, "machine_ticks": busy,
            "learner": {"outstanding_tasks": 40.0, "held": 3.0}}


def test_a_window_turns_readings_into_rates_per_stream_role_and_node():
    held0 = {"TASKS": (2, 600), "ROLLOUTS": (1, 70_000), "SCORED": (10, 700_000)}
    held1 = {"TASKS": (2, 600), "ROLLOUTS": (3, 210_000), "SCORED": (30, 2_100_000)}
    a = _reading(100.0, seqs={"TASKS": 10, "ROLLOUTS": 100, "SCORED": 100}, held=held0,
                 cpu={"learn": 1.0, "verify": 2.0, "rollout": 0.0, **dict.fromkeys(NODES, 0.0)},
                 conns={"rollout-0": {"in_bytes": 0, "out_bytes": 0}}, busy=(100, 200))
    b = _reading(110.0, seqs={"TASKS": 30, "ROLLOUTS": 300, "SCORED": 300}, held=held1,
                 cpu={"learn": 6.0, "verify": 4.0, "rollout": 1.0, **dict.fromkeys(NODES, 2.0)},
                 conns={"rollout-0": {"in_bytes": 15_000_000, "out_bytes": 0}}, busy=(1800, 2200), dead=0)
    w = window([a, b])
    assert w["seconds"] == 10.0
    assert w["streams"]["ROLLOUTS"]["msgs_s"] == 20.0
    assert w["streams"]["ROLLOUTS"]["mean_msg_bytes"] == 70_000.0  # (70,000 + 210,000) / (1 + 3)
    assert w["streams"]["ROLLOUTS"]["stored_bytes_s"] == 1_400_000.0
    # A sample stream's bytes are what its publishers sent; TASKS's, its tasks at their stored size.
    assert w["streams"]["ROLLOUTS"]["bytes_s"] == w["streams"]["ROLLOUTS"]["published_wire_bytes_s"] == 1_500_000.0
    assert w["streams"]["TASKS"]["bytes_s"] == 20 * 300 / 10
    assert w["streams"]["SCORED"]["held_growth_bytes_s"] == 140_000.0
    assert w["cpu_cores"]["learn"] == 0.5 and w["cpu_cores"]["rlvr-nats-1"] == 0.2
    assert w["machine_busy_share"] == pytest.approx(1700 / 2000)
    assert w["nodes"]["rlvr-nats-1"]["leads"] == ["TASKS", "ROLLOUTS", "SCORED"]
    assert w["dead_letters"] == 0
    assert w["learner"] == {"outstanding_tasks_max": 40.0, "held_max": 3.0}


def _level(k, kept, *, learn=0.2, busy=0.5, rollouts_pending=(0, 0), naks=0, outstanding=10):
    streams = {kind: {"msgs_s": 10.0, "bytes_s": 1e6, "stored_bytes_s": 1e6, "pending_start": 0, "pending_end": 0, "redelivered": 0,
                      "published_wire_bytes_s": 1e6, "delivered_msgs_s": 10.0, "ack_pending_end": 0}
               for kind in ("TASKS", "ROLLOUTS", "SCORED")}
    streams["ROLLOUTS"]["pending_start"], streams["ROLLOUTS"]["pending_end"] = rollouts_pending
    nodes = {n: {"in_bytes_s": 0, "out_bytes_s": 0, "disk_write_bytes_s": 0, "store_bytes": 0,
                 "store_growth_bytes_s": 0, "mem": 0, "slow_consumers": 0, "leads": []} for n in NODES}
    return {"rollouts": k, "verifiers": 2, "seconds": 40.0, "kept_share": kept, "streams": streams, "nodes": nodes,
            "cpu_cores": {"learn": learn, "verify": 0.2, "rollout": 0.1 * k, **dict.fromkeys(NODES, 0.1)},
            "machine_busy_share": busy, "roles": {"rollout": {"naked": naks}}, "offered_tokens_s": 1e5 * k,
            "tokens_s": kept * 1e5 * k, "samples_s": 10.0, "dead_letters": 0, "max_inflight_tasks": 64,
            "learner": {"outstanding_tasks_max": outstanding, "held_max": 0},
            "latency": {"messages_read": 5, "bytes_per_token": 17.0, "tokens_mean": 4000.0, "tokens_max": 32768,
                        "stages": {}}}


def test_what_broke_first_is_read_at_the_first_level_that_fell_behind():
    levels = [_level(1, 1.0), _level(2, 0.95), _level(4, 0.6, learn=0.97, rollouts_pending=(0, 400), naks=3),
              _level(8, 0.3, busy=1.0)]
    lv, found = diagnose(levels, cpus=2, saturated=0.8)
    assert lv["rollouts"] == 4
    assert any("one learn process at 0.97" in f for f in found)
    assert any("the verifiers" in f and "0 -> 400" in f for f in found)
    assert any("client backpressure" in f and "rollout 3" in f for f in found)
    assert not any("machine's CPU" in f or "feeder's window" in f for f in found)
    starved = _level(2, 0.5, outstanding=64)
    lv, found = diagnose([_level(1, 1.0), starved], cpus=2, saturated=0.8)
    assert any("feeder's window" in f and "64 of learn.max_inflight_tasks = 64" in f for f in found)
    starved["streams"]["TASKS"]["pending_end"] = 40  # tasks waiting: the window is full, the rollouts are not idle
    lv, found = diagnose([_level(1, 1.0), starved], cpus=2, saturated=0.8)
    assert not any("feeder's window" in f for f in found)
    lv, found = diagnose([_level(1, 1.0)], cpus=2, saturated=0.8)
    assert lv["rollouts"] == 1 and found[0].startswith("nothing at its limit")


def test_the_report_holds_the_tables_and_the_picture(tmp_path):
    result = {"command": "python -m bench.scale", "commit": "abc", "dirty": [], "date": "today", "cpus": 2,
              "loadavg_before": [1.0], "loadavg_after": [1.0], "label": "", "stopped": "the last level",
              "seconds": 100.0, "shape": {f: getattr(Shape(), f) for f in Shape.__struct_fields__},
              "levels": [_level(1, 1.0), _level(2, 0.9)]}
    out = tmp_path / "scale.md"
    write(result, out)
    text = out.read_text()
    for heading in ("## What broke first", "## Throughput per level", "## CPU per level", "## Latency per level",
                    "## The nodes per level", "## Backpressure per level"):
        assert heading in text
    assert "![bytes/s per stream against rollout replicas](scale.png)" in text
    assert (tmp_path / "scale.png").stat().st_size > 10_000


@pytest.mark.slow
def test_the_bench_runs_a_tiny_ladder_on_a_real_cluster(tmp_path):
    """One level of one rollout replica: the cluster forms, the learner creates R3 streams, samples reach
    the learner, and the report says what it measured."""
    out = tmp_path / "scale.md"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-m", "bench.scale", "--quick", "--rollouts", "1", "--warmup-s", "3", "--window-s", "8",
         "--out", str(out), "--keep", str(tmp_path / "work")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.with_suffix(".json").read_text())
    [level] = result["levels"]
    assert level["samples_s"] > 0 and level["streams"]["SCORED"]["bytes_s"] > 0
    assert level["latency"]["messages_read"] > 0 and level["latency"]["tokens_mean"] > 100
    assert {level["streams"][k]["leader"] for k in ("TASKS", "ROLLOUTS", "SCORED")} <= set(NODES)
    assert level["dead_letters"] == 0
    assert "## What broke first" in out.read_text() and out.with_suffix(".png").exists()
    logs = (tmp_path / "work" / "roles").glob("*.log")
    assert {p.stem for p in logs} >= {"learn-0", "verify-0", "rollout-0"}
    # Every role and node the bench started is gone: nothing runs with a file of its work dir.
    left = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(tmp_path).encode() in cmdline.read_bytes():
                left.append(cmdline.parent.name)
        except OSError:
            pass
    assert left == []
