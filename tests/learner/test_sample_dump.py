"""The learner writes what it trained (learner/watch/sample_dump.py): every `every_steps`, off
the event loop, and a write that fails never stops training. The last test runs a real
(dry) learner process on a real nats-server and reads its <out_dir>/samples/."""

from __future__ import annotations

import json

import anyio
import pytest
from structlog.testing import capture_logs

from rlvr.learner.config import LearnConfig, SamplesConfig
from rlvr.learner.watch.sample_dump import SampleDump, step_file
from tests.busclient import BusClient
from tests.conftest import write_config
from tests.factories import make_scored, scored_messages


def _groups() -> list:
    return [[make_scored(k=0, i=0, reward=1.0, n=2), make_scored(k=0, i=1, reward=0.0, n=2)]]


def _write(dump: SampleDump, steps: range) -> None:
    async def go():
        for step in steps:
            await dump.write(step, _groups())
        await dump.close()

    anyio.run(go)


def test_the_step_never_waits_for_the_dump_and_a_writer_far_behind_skips_the_oldest(tmp_path, monkeypatch):
    """Issue 45: the dump was awaited on the step's path. Now ``write`` returns at once even while the
    writer is stuck, and past MAX_PENDING steps waiting the oldest is skipped and counted."""
    import threading

    from rlvr.learner.watch import sample_dump

    release, started, written = threading.Event(), threading.Event(), []

    def slow(out_dir, step, groups, advantage):
        started.set()
        release.wait(30)
        written.append(step)

    monkeypatch.setattr(sample_dump, "write_step", slow)
    dump = SampleDump(tmp_path, SamplesConfig(), None)
    steps = range(1, SampleDump.MAX_PENDING + 4)

    async def go():
        with anyio.fail_after(5):  # with the writer blocked, every write returns at once
            await dump.write(steps[0], _groups())
            await anyio.to_thread.run_sync(started.wait, 5)  # the writer holds step 1 now
            for step in steps[1:]:
                await dump.write(step, _groups())
        release.set()
        await dump.close()

    anyio.run(go)
    # Step 1 was in the writer's hands; of the rest, the newest MAX_PENDING were kept.
    assert written == [1, *steps[-SampleDump.MAX_PENDING:]]
    assert dump.skipped == len(steps) - 1 - SampleDump.MAX_PENDING


def test_the_dump_writes_every_n_steps_and_nothing_when_off(tmp_path):
    _write(SampleDump(tmp_path / "a", SamplesConfig(every_steps=2), None), range(1, 5))
    assert sorted(p.name for p in (tmp_path / "a" / "samples").iterdir()) == ["step-000002.jsonl", "step-000004.jsonl"]
    _write(SampleDump(tmp_path / "b", SamplesConfig(dump=False), None), range(1, 3))
    assert not (tmp_path / "b").exists()


def test_a_failing_write_is_logged_once_and_never_raises(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")  # <out>/samples cannot be made under a file
    dump = SampleDump(blocked, SamplesConfig(), None)
    with capture_logs() as logs:
        _write(dump, range(1, 4))
    assert dump.failures == 3
    assert [e["event"] for e in logs] == ["samples_dump_failed"] and logs[0]["step"] == 1


def test_the_config_section_is_typed_and_unknown_keys_are_named():
    import msgspec

    cfg = msgspec.convert({"samples": {"dump": False, "every_steps": 5}}, LearnConfig)
    assert cfg.samples == SamplesConfig(dump=False, every_steps=5) and LearnConfig().samples.dump
    with pytest.raises(msgspec.ValidationError, match=r"unknown field `every` - at `\$.samples`"):
        msgspec.convert({"samples": {"every": 5}}, LearnConfig)
    with pytest.raises(msgspec.ValidationError, match=r">= 1"):
        msgspec.convert({"samples": {"every_steps": 0}}, LearnConfig)


def test_a_dry_learner_writes_each_trained_sample_of_each_step(actors, nats_server, tmp_path):
    from tests.learner.learner_helpers import scored_groups

    run = "dump"
    out = tmp_path / "o"
    cfg = write_config(tmp_path / "dump.json", {
        "run": run, "bus": {"heartbeat_every_s": 0.5},
        "learn": {"group_size": 4, "groups_per_step": 1, "steps": 2, "max_staleness": 1000,
                  "out_dir": str(out), "lease_ttl_s": 2.0},
    })
    learner = actors.start("learn", cfg, "learn-0")
    bus = BusClient(nats_server.url, run)
    bus.wait_heartbeat(lambda hb: hb.role == "learn" and hb.state == "running", timeout_s=120)
    bus.publish_scored(scored_messages(scored_groups(run, 2, vocab=50)))
    assert learner.wait(timeout=120) == 0, actors.log_text("learn-0")[-3000:]
    for step in (1, 2):
        recs = [json.loads(line) for line in step_file(out, step).read_text().splitlines()]
        assert len(recs) == 4 and {r["step"] for r in recs} == {step} and len({r["group_id"] for r in recs}) == 1
        assert all(len(r["mask"]) == len(r["completion_ids"]) for r in recs)
        assert sum(r["advantage"] for r in recs) == pytest.approx(0.0, abs=1e-6)  # GRPO: centred in the group
        assert {r["advantage_estimator"] for r in recs} == {"grpo"}
