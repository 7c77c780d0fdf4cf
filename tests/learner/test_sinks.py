"""W&B (offline) and MLflow (a local file store) beside metrics.jsonl: the same
step metrics, eval rounds, alarms, the config once and sample tables; a tracker
that fails is turned off once and training's own record goes on."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from rlvr.learner.watch.alarms import Alarm
from rlvr.learner.config import LearnConfig, MlflowConfig, TrackersConfig, WandbConfig
from rlvr.learner.watch.metrics import MetricsWriter
from rlvr.learner.watch.sinks import MlflowSink, Trackers, numbers
from tests.learner.learner_helpers import scored_groups

pytest.importorskip("wandb")
pytest.importorskip("mlflow")

RESOLVED = json.dumps({"run": "r1", "nats": {"url": "nats://alice:hunter2-secret@bus:4222"},
                       "learn": {"steps": 4, "group_size": 4, "sampling": {"stop": ["\n"]}}}).encode()


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _trackers(tmp_path: Path, **kw) -> TrackersConfig:
    return TrackersConfig(wandb=WandbConfig(project="t", mode="offline"),
                          mlflow=MlflowConfig(tracking_uri=f"file:{tmp_path}/mlruns", experiment="t"), **kw)


def _step_record(step: int) -> dict:
    return {"reward_mean": 0.25 * step, "loss": -0.1 / step, "pass_rate_exact": step / 8, "staleness_hist_0": 32.0,
            "step": step, "policy_version": step - 1, "samples": 32, "wait_s": 0.001 * step}


def _drive(writer: MetricsWriter, steps: int = 4) -> None:
    groups = scored_groups("r1", 2, vocab=32)
    writer.write({"event": "eval", "eval_round": 1, "label": "before", "prompts": 8, "missing": 0, "step": 0,
                  "pass_at_1": 0.125, "finished_at": 1.7e9})
    for step in range(1, steps + 1):
        writer.write(_step_record(step))
        writer.samples(step, [groups[:4], groups[4:]])
        if step == 2:
            writer.write(Alarm("flat_reward", "exact", "reward flat for 20 groups", {"wrong": 20}, []).record())
    writer.close()


def _jsonl(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _steps_in(records: list[dict]) -> dict[int, dict[str, float]]:
    return {r["step"]: numbers(r) for r in records if "event" not in r}


# --- reading back what each tracker recorded -----------------------------------------------------
def _wandb_records(root: Path):
    """The records of the one offline run under ``root``: the .wandb file is a LevelDB-style log
    (a 7-byte header, then 32 KiB blocks of chunks with a 7-byte header each) of protobuf records."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = root.glob("wandb/offline-run-*/run-*.wandb")
    data, pos, buf, block = path.read_bytes(), 7, b"", 32 * 1024
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        _crc, size, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            break
        buf += data[pos + 7 : pos + 7 + size]
        pos += 7 + size
        if kind in (1, 4):  # a whole record, or the last chunk of one
            record = pb.Record()
            record.ParseFromString(buf)
            buf = b""
            yield record


def _wandb_history(root: Path) -> tuple[dict[int, dict], dict]:
    rows: dict[int, dict] = {}
    config: dict = {}
    for rec in _wandb_records(root):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in rec.history.item}
            rows.setdefault(row["_step"], {}).update(row)
        elif kind == "run":
            config.update({i.key: json.loads(i.value_json) for i in rec.run.config.update})
    return rows, config


def _mlflow_run(tmp_path: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"file:{tmp_path}/mlruns")
    (run,) = client.search_runs([client.get_experiment_by_name("t").experiment_id])
    return client, run


def _mlflow_steps(client, run, keys) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for key in keys:
        for m in client.get_metric_history(run.info.run_id, key):
            out.setdefault(m.step, {})[key] = m.value
    return out


# --- tests -------------------------------------------------------------------------------------------------
def test_trackers_record_the_same_step_metrics_as_metrics_jsonl(tmp_path):
    out = tmp_path / "run"
    _drive(MetricsWriter(out, _trackers(tmp_path, samples_every=2, samples_per_table=3), run_name="r1",
                         resolved_config=RESOLVED))
    records = _jsonl(out)
    steps = _steps_in(records)
    assert sorted(steps) == [1, 2, 3, 4] and not [r for r in records if r.get("kind") == "tracker_disabled"]
    keys = set(steps[1])

    rows, config = _wandb_history(out)
    assert {s: {k: float(rows[s][k]) for k in keys} for s in steps} == steps
    assert rows[0]["eval/pass_at_1"] == 0.125 and "eval/finished_at" not in rows[0]
    assert rows[2]["alarms/flat_reward"] == 1
    assert rows[2]["sample_table/nrows"] == 3 and rows[4]["sample_table/nrows"] == 3 and "sample_table/nrows" not in rows[3]
    assert config["learn"]["steps"] == 4
    assert "hunter2-secret" not in json.dumps(config)  # the resolved config goes out redacted

    client, run = _mlflow_run(tmp_path)
    assert _mlflow_steps(client, run, keys) == steps
    assert _mlflow_steps(client, run, ["eval/pass_at_1"]) == {0: {"eval/pass_at_1": 0.125}}
    assert run.data.params["learn.steps"] == "4" and run.data.params["learn.sampling.stop"] == '["\\n"]'
    assert "hunter2-secret" not in run.data.params["nats.url"]
    assert run.data.tags["alarm.flat_reward"] == "reward flat for 20 groups"
    assert run.info.status == "FINISHED"
    tables = sorted(a.path for a in client.list_artifacts(run.info.run_id, "samples"))
    assert tables == ["samples/step_0000002.json", "samples/step_0000004.json"]
    table = json.loads(Path(client.download_artifacts(run.info.run_id, tables[0], str(tmp_path / "dl"))).read_text())
    assert table["columns"][:5] == ["step", "group_id", "prompt", "completion", "reward"] and len(table["data"]) == 3


def test_a_failing_tracker_is_turned_off_once_and_the_rest_goes_on(tmp_path, monkeypatch):
    def disk_full(self, step, values):
        raise OSError("No space left on device")

    monkeypatch.setattr(MlflowSink, "step", disk_full)
    out = tmp_path / "run"
    with capture_logs() as logs:
        _drive(MetricsWriter(out, _trackers(tmp_path), run_name="r1"))
    records = _jsonl(out)
    assert sorted(_steps_in(records)) == [1, 2, 3, 4]  # metrics.jsonl has every record
    assert sum(r.get("event") == "eval" for r in records) == 1
    off = [r for r in records if r.get("kind") == "tracker_disabled"]
    assert len(off) == 1 and off[0]["event"] == "alarm" and off[0]["tracker"] == "mlflow"
    assert "No space left on device" in off[0]["message"]
    warned = [e for e in logs if e["event"] == "tracker_disabled"]
    assert len(warned) == 1 and warned[0]["tracker"] == "mlflow" and warned[0]["log_level"] == "warning"

    rows, _ = _wandb_history(out)  # W&B went on: every step
    assert {s: rows[s]["reward_mean"] for s in (1, 2, 3, 4)} == {s: 0.25 * s for s in (1, 2, 3, 4)}
    _client, run = _mlflow_run(tmp_path)
    assert run.info.status == "FINISHED"  # its run is still closed at the end


def test_a_tracker_that_cannot_start_is_turned_off_and_training_records_go_on(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    out = tmp_path / "run"
    with capture_logs() as logs:
        _drive(MetricsWriter(out, TrackersConfig(mlflow=MlflowConfig(tracking_uri=f"file:{blocker}/mlruns"))))
    records = _jsonl(out)
    assert sorted(_steps_in(records)) == [1, 2, 3, 4]
    (off,) = [r for r in records if r.get("kind") == "tracker_disabled"]
    assert "open failed" in off["message"]
    assert [e["during"] for e in logs if e["event"] == "tracker_disabled"] == ["open"]


def test_trackers_are_off_by_default_and_unknown_keys_are_named():
    import msgspec

    assert LearnConfig().trackers == TrackersConfig()
    assert TrackersConfig().wandb is None and TrackersConfig().mlflow is None
    with pytest.raises(msgspec.ValidationError, match="api_key"):
        msgspec.convert({"trackers": {"wandb": {"api_key": "x"}}}, LearnConfig)


def test_the_offline_wandb_run_holds_every_row_once_close_returns_however_slow_its_service(tmp_path, monkeypatch):
    """``run.finish()`` returns once wandb-core has the exit record; the run's file gets its rows when
    the service closes it (its last 32 KiB block stays in memory until then). On a busy machine a reader
    came first and the run lacked step 1 (issue 44). Here the service is stopped across ``finish``, as
    a starved process would be, and resumed 2 s later: ``close`` must wait for it."""
    import os
    import signal
    import threading

    from wandb.sdk.lib.service.service_connection import ServiceConnection

    real = ServiceConnection.inform_finish
    resumed: list[threading.Timer] = []

    def slow_service(self, run_id):
        pid = self._proc._process.pid  # the wandb-core process this connection started
        os.kill(pid, signal.SIGSTOP)
        timer = threading.Timer(2.0, os.kill, (pid, signal.SIGCONT))
        resumed.append(timer)
        timer.start()
        real(self, run_id)

    monkeypatch.setattr(ServiceConnection, "inform_finish", slow_service)
    out = tmp_path / "run"
    try:
        _drive(MetricsWriter(out, TrackersConfig(wandb=WandbConfig(project="t", mode="offline")), run_name="r1"))
        rows, _ = _wandb_history(out)  # read at once, as `wandb sync` or the next stage would
    finally:
        for timer in resumed:
            timer.join()
    assert len(resumed) == 1
    assert {s: rows[s]["reward_mean"] for s in (1, 2, 3, 4)} == {s: 0.25 * s for s in (1, 2, 3, 4)}
    assert rows[0]["eval/pass_at_1"] == 0.125 and rows[2]["alarms/flat_reward"] == 1
    assert not any(r.get("kind") == "tracker_disabled" for r in _jsonl(out))


def test_a_tracker_stuck_in_one_call_at_close_is_turned_off_naming_the_records_it_never_sent(tmp_path, monkeypatch):
    """Its queue dies with the learner's process: the loss is said (an alarm record that MetricsWriter
    writes to metrics.jsonl), never silent; and it is given up once stuck, not after close's whole wait."""
    import threading

    entered, release = threading.Event(), threading.Event()

    def stuck(self, step, values):  # a tracking server that stopped answering
        entered.set()
        release.wait(120)

    monkeypatch.setattr(MlflowSink, "step", stuck)
    trackers = Trackers(TrackersConfig(mlflow=_trackers(tmp_path).mlflow), out_dir=tmp_path / "run", run_name="r1")
    try:
        trackers.record(_step_record(1))
        assert entered.wait(120), "the tracker never reached its first step"
        trackers.record(_step_record(2))
        trackers.record(_step_record(3))
        started = time.monotonic()
        trackers.close(stuck_s=0.5)  # the whole wait stays CLOSE_WAIT_S (600 s)
        waited = time.monotonic() - started
    finally:
        release.set()
        trackers.close()
    assert waited < 60
    off = trackers.notices.get_nowait()
    assert off["kind"] == "tracker_disabled" and off["tracker"] == "mlflow"
    assert "close failed: stuck 0.5s in one call; 2 records never sent" in off["message"]
    assert trackers.notices.empty()


def test_close_waits_for_a_slow_tracker_as_long_as_it_progresses(tmp_path, monkeypatch):
    """On 2 busy cores wandb.init alone took over 60 s, the whole wait close used to allow: the rows
    queued behind it were dropped (issue 44's KeyError: 1, seen again at load 12-16). A tracker that
    moves is waited for, however long it takes in all (up to CLOSE_WAIT_S)."""
    import threading

    real, opened = MlflowSink.step, threading.Event()

    def slow(self, step, values):  # each call well inside stuck_s, all of them together well past it
        opened.set()
        time.sleep(0.5)
        real(self, step, values)

    monkeypatch.setattr(MlflowSink, "step", slow)
    trackers = Trackers(TrackersConfig(mlflow=_trackers(tmp_path).mlflow), out_dir=tmp_path / "run", run_name="r1")
    for step in range(1, 13):
        trackers.record(_step_record(step))
    assert opened.wait(120), "the tracker never reached its first step"
    started = time.monotonic()
    trackers.close(stuck_s=3.0)
    assert time.monotonic() - started > 3.0  # the whole close outlasted stuck_s: it was waited for
    assert trackers.notices.empty()
    client, run = _mlflow_run(tmp_path)
    assert sorted(_mlflow_steps(client, run, ["reward_mean"])) == list(range(1, 13))
    assert run.info.status == "FINISHED"
