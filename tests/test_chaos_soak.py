"""The soak's sampling and verdict (bench/chaos/soak.py), without the hour: the verdict on
made-up curves, the sampler on real processes and a real nats-server."""

from __future__ import annotations

import subprocess
import sys

import anyio
import nats
from nats.js import api

from bench.chaos.soak import judge, role_of, sample_processes, sample_store


def _samples(minutes: int, rss=lambda m: 100.0, fds=lambda m: 40, role="verify-0", store=None) -> list[dict]:
    return [{"minute": m, "roles": {role: {"rss_mib": rss(m), "fds": fds(m), "threads": 7, "processes": 2}},
             "store": store(m) if store else {}} for m in range(minutes + 1)]


def test_flat_curves_pass():
    v = judge(_samples(60), minutes=60)
    assert v["ok"], v["findings"]
    assert v["baseline_minute"] == 10 and v["growth"]["verify-0"] == {"rss_mib": 0.0, "fds": 0.0}


def test_rss_growing_more_than_ten_percent_between_minute_10_and_60_fails_naming_the_role():
    v = judge(_samples(60, rss=lambda m: 100.0 + 0.5 * m), minutes=60)  # medians 105 -> 129.5 MiB
    assert not v["ok"]
    assert any(f.startswith("verify-0 rss_mib grew 23.3%") for f in v["findings"]), v["findings"]


def test_growth_before_minute_10_is_warm_up_not_a_leak():
    v = judge(_samples(60, rss=lambda m: 50.0 + 5 * m if m < 10 else 100.0), minutes=60)
    assert v["ok"], v["findings"]


def test_one_sample_taken_mid_fault_decides_nothing():
    v = judge(_samples(60, fds=lambda m: 90 if m == 60 else 40), minutes=60)  # a spike in the last sample only
    assert v["ok"], v["findings"]


def test_fds_leak_fails():
    v = judge(_samples(60, fds=lambda m: 40 + m), minutes=60)
    assert not v["ok"] and any("verify-0 fds grew" in f for f in v["findings"])


def test_a_stream_over_its_max_bytes_fails():
    def store(m):
        return {"streams": {"RLVR_builtin_DEAD": {"bytes": 2000 if m == 30 else 10, "messages": 1,
                                                  "max_bytes": 1000}}}

    v = judge(_samples(60, store=store), minutes=60)
    assert not v["ok"] and any("minute 30: stream RLVR_builtin_DEAD holds 2000 bytes" in f for f in v["findings"])


def test_a_run_that_stopped_early_or_too_short_fails():
    v = judge(_samples(8), minutes=60, stopped_early="rlvr-actor up exited 1 at minute 8")
    assert not v["ok"]
    assert any("stopped before its time" in f for f in v["findings"])
    assert any("too few samples" in f for f in v["findings"])


def test_a_shorter_soak_is_judged_from_a_sixth_of_its_length():
    v = judge(_samples(12, rss=lambda m: 100.0 if m <= 2 else 150.0), minutes=12)
    assert v["baseline_minute"] == 2 and not v["ok"]


def test_role_of_reads_the_replica_or_the_server():
    assert role_of(["/x/python", "-m", "rlvr.cli", "--role", "verify", "--replica", "verify-1"]) == "verify-1"
    assert role_of(["/opt/bin/nats-server", "-js"]) == "nats-server"
    assert role_of(["/bin/sh", "-c", "true"]) is None


# A role that starts a worker of its own, then says so (a verifier and its pool).
_ROLE = """
import subprocess, sys, time
w = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
print("ready", flush=True)
sys.stdin.read()
w.stdin.close(); w.wait()
"""


def test_a_role_is_sampled_with_its_children():
    import os

    proc = subprocess.Popen([sys.executable, "-c", _ROLE, "--replica", "soak-test-0"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        got = sample_processes(os.getpid())["soak-test-0"]
        assert got["processes"] == 2
        assert got["rss_mib"] > 1 and got["fds"] >= 6 and got["threads"] >= 2
    finally:
        proc.stdin.close()
        proc.wait(30)


def test_the_store_sample_reads_the_runs_streams_and_their_limits(nats_server, tmp_path):
    async def fill():
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        await js.add_stream(api.StreamConfig(name="RLVR_soak_SCORED", subjects=["rlvr.soak.scored"],
                                             max_bytes=1 << 20))
        await js.add_stream(api.StreamConfig(name="OTHER", subjects=["other"]))
        for i in range(5):
            await js.publish("rlvr.soak.scored", b"x" * 100)
        await nc.close()

    anyio.run(fill)
    got = sample_store(nats_server.url, "soak", nats_server.store_dir)
    assert set(got["streams"]) == {"RLVR_soak_SCORED"}
    st = got["streams"]["RLVR_soak_SCORED"]
    assert st["messages"] == 5 and st["bytes"] > 500 and st["max_bytes"] == 1 << 20
    assert got["dir_bytes"] > 0 and got["account_storage"] >= st["bytes"]
    findings = judge([{"minute": 0, "roles": {}, "store": got}], minutes=0)["findings"]
    assert not [f for f in findings if "stream" in f or "storage" in f], findings  # within its limits


def test_the_servers_memory_is_drawn_not_judged_the_store_is():
    v = judge(_samples(60, rss=lambda m: 50.0 + m, role="nats-server"), minutes=60)
    assert v["ok"] and "nats-server" not in v["growth"]


def test_a_run_that_stopped_early_says_why_from_its_role_logs(tmp_path):
    from bench.chaos.soak import _last_errors

    (tmp_path / "rollout-0.log").write_text("rlvr-actor: rollout.engine.kind: unknown engine 'x'\n")
    (tmp_path / "learn-0.log").write_text('{"event": "step", "level": "info"}\n'
                                          '{"event": "actor_failed", "level": "error", "error": "boom"}\n')
    (tmp_path / "verify-0.log").write_text('{"event": "step", "level": "info"}\n')
    text = _last_errors(tmp_path)
    assert "rollout-0: rlvr-actor: rollout.engine.kind: unknown engine 'x'" in text
    assert 'learn-0: {"event": "actor_failed"' in text and "verify-0" not in text
