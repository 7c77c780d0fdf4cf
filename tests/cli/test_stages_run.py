"""Stages in one run under ``rlvr-actor up`` (cli/stages/runner.py), end to end on the built-in
example's tiny model: sft -> rl -> rejection_sft -> rl from one config, and a run whose learner is
SIGKILLed during rejection sampling and again during the last RL stage, resumed each time with
``up --run-dir``: nothing lost or trained twice within the RL stages (their ledgers against what
their SCORED streams hold, read from the run's nats store after the run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from rlvr.cli.natsserver import NatsServer
from rlvr.learner.custody.checkpoint import CheckpointStore
from rlvr.protocol import ScoredGroup
from tests.busclient import BusClient
from tests.cli.stages_helpers import tiny_stages
from tests.conftest import wait_for, write_config

pytestmark = pytest.mark.slow

STEPS, GROUPS, G = 3, 4, 4  # every RL stage of tiny_stages: dynamic sampling off, so every step is full


def _up(config: Path, run_dir: Path, out: Path) -> subprocess.Popen:
    with open(out, "a") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "rlvr.cli", "up", "--config", str(config), "--run-dir", str(run_dir),
             "--display", "plain"],
            stdout=f, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True,
        )


def _finish(up: subprocess.Popen, timeout_s: float) -> int:
    try:
        return up.wait(timeout=timeout_s)
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()


def _learner_pid(part_dir: Path) -> int | None:
    """The learner role process of one stage part (its command line names the part's config)."""
    wanted = str(part_dir / "config.json")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--role" in cmd and b"learn" in cmd and wanted.encode() in cmd:
            return int(entry.name)
    return None


def _rl_fates(run_dir: Path, run: str, part: Path) -> dict:
    """One RL stage's exactly-once check: its ledger entries against the samples its SCORED stream holds."""
    store = CheckpointStore(part / "checkpoints")
    state = store.load_latest()
    trained = Counter(sid for e in store.ledger_entries() for sid in e.trained)
    dropped = {sid for e in store.ledger_entries() for sid in e.dropped}
    server = NatsServer(run_dir / "nats", log_file=run_dir / "logs" / "check-nats.log").start()
    try:
        # One message per task's group (protocol/groups.py): each member under its message's seq.
        stored = [(seq, sc) for seq, data, _ in BusClient(server.url, run).stream_messages("SCORED")
                  for sc in msgspec.msgpack.decode(data, type=ScoredGroup).items()]
    finally:
        server.stop()
    train = [(seq, sc) for seq, sc in stored if sc.sample.purpose == "train"]
    below_floor = [sc.sample_id for seq, sc in train if seq < state.ledger.floor]
    return {
        "twice": [sid for sid, n in trained.items() if n > 1],
        "lost": [sid for sid in below_floor if sid not in trained and sid not in dropped],
        "trained": sum(trained.values()), "steps": state.step,
    }


def _check_rl_stages(run_dir: Path, run: str) -> None:
    for i, name in ((1, "1-reasoning-rl"), (3, "3-final-rl")):
        fates = _rl_fates(run_dir, f"{run}-s{i}", run_dir / "stages" / name / "rl")
        assert fates["twice"] == [] and fates["lost"] == [], (name, fates)
        assert fates["steps"] == STEPS and fates["trained"] == STEPS * GROUPS * G, (name, fates)


def _check_summary(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    stages = summary["stages"]
    assert [s["kind"] for s in stages] == ["sft", "rl", "rejection_sft", "rl"]
    assert all(s["status"] == "done" and s["steps"] > 0 and s["seconds"] > 0 for s in stages), stages
    assert all(s["pass_at_1_before"] is not None and s["pass_at_1_after"] is not None for s in stages), stages
    for before, after in zip(stages, stages[1:]):  # each stage starts from the previous one's weights
        assert after["model_start"] == before["model_end"]
        assert after["pass_at_1_before"] == before["pass_at_1_after"]  # the same model, measured once
    counts = json.loads((run_dir / "stages" / "2-rejection" / "kept_counts.json").read_text())
    kept = (run_dir / "stages" / "2-rejection" / "kept.jsonl").read_text().splitlines()
    assert counts["kept"] == len(kept) > 0 and counts["sampled"] == 8 * 4
    assert counts["kept"] + sum(counts[k] for k in ("rejected", "too_short", "too_long", "truncated",
                                                    "language_mixing", "duplicate", "over_per_prompt")) == 32
    per_prompt = Counter(json.loads(line)["source"]["index"] for line in kept)
    assert max(per_prompt.values()) <= 2  # filters.max_per_prompt
    return summary


def test_four_stages_run_in_order_from_one_config(tmp_path):
    run_dir, out = tmp_path / "run", tmp_path / "up.out"
    config = write_config(tmp_path / "c.json", tiny_stages("four"))
    rc = _finish(_up(config, run_dir, out), timeout_s=900)
    text = out.read_text()
    assert rc == 0, text[-3000:]
    _check_summary(run_dir)
    _check_rl_stages(run_dir, "four")
    for name in ("0-cold-start", "1-reasoning-rl", "2-rejection", "3-final-rl"):
        assert name in text  # the stage table
    assert "pass@1 before" in text


def test_a_learner_killed_in_rejection_sampling_and_in_rl_resumes_with_nothing_lost_or_trained_twice(tmp_path):
    run_dir, out = tmp_path / "run", tmp_path / "up.out"
    raw = tiny_stages("kill")
    raw["stages"][2]["prompts_per_batch"] = 1  # 8 sampling steps: time to find the learner after the first
    config = write_config(tmp_path / "c.json", raw)
    sample = run_dir / "stages" / "2-rejection" / "sample"
    final = run_dir / "stages" / "3-final-rl" / "rl"
    for part, committed in ((sample, sample / "samples" / "step-000001.jsonl"), (final, final / "checkpoints" / "latest")):
        up = _up(config, run_dir, out)
        try:
            wait_for(lambda c=committed: c.exists() or up.poll() is not None, timeout_s=600, what=f"{committed}")
            assert up.poll() is None, out.read_text()[-3000:]
            pid = _learner_pid(part)
            assert pid is not None, f"no learner process for {part}"
            os.kill(pid, signal.SIGKILL)
            assert _finish(up, timeout_s=120) != 0  # the stage failed: `up` says so and stops
        finally:
            if up.poll() is None:
                os.killpg(up.pid, signal.SIGKILL)
                up.wait()
        record = json.loads((run_dir / "stages.json").read_text())
        assert record["stages"][int(part.parent.name[0])]["status"] == "running"
    rc = _finish(_up(config, run_dir, out), timeout_s=900)
    assert rc == 0, out.read_text()[-3000:]
    summary = _check_summary(run_dir)
    assert [s["attempts"] for s in summary["stages"]] == [1, 1, 2, 2]
    _check_rl_stages(run_dir, "kill")
