"""The live panel of ``rlvr-actor up``, rendered without a TTY into a
recording console, and its fall-back to plain lines."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import anyio
import msgspec
import nats
from rich.console import Console

from rlvr.cli.commands.status import StatusSnapshot
from rlvr.cli.ui.live import LiveDisplay, LiveState, StatusPoller, make_progress, render_panel
from rlvr.protocol import Heartbeat, RunNames, encode
from tests.conftest import wait_for, write_config

STATUS = msgspec.convert({
    "run": "demo",
    "policy_version": 3,
    "replicas": [
        {"role": "learn", "replica": "learn-0", "state": "running", "age_s": 0.4, "policy_version": 3,
         "in_flight": 64, "gauges": {"tokens_per_s": 512.0, "step": 3.0}, "counters": {}},
        {"role": "rollout", "replica": "rollout-0", "state": "running", "age_s": 1.2, "policy_version": 3,
         "in_flight": 8, "gauges": {"tokens_per_s": 830.0, "samples_per_s": 95.0}, "counters": {}},
        {"role": "verify", "replica": "verify-0", "state": "draining", "age_s": 0.9, "policy_version": 0,
         "in_flight": 4, "gauges": {"samples_per_s": 47.5}, "counters": {}},
    ],
    "streams": {"TASKS": {"messages": 12, "bytes": 1}, "ROLLOUTS": {"messages": 40, "bytes": 1},
                "SCORED": {"messages": 300, "bytes": 1}, "WEIGHTS": {"messages": 1, "bytes": 1},
                "DEAD": {"messages": 2, "bytes": 1}},
    "consumers": {"rollout": {"lag": 3, "ack_pending": 8}, "verify": {"lag": 30, "ack_pending": 10},
                  "learn": {"lag": 0, "ack_pending": 64}},
    "learner": {},
}, StatusSnapshot)


class FakeProc:
    def __init__(self, rc: int | None) -> None:
        self.returncode = rc
        self.pid = 1

    def poll(self) -> int | None:
        return self.returncode


class FakeChild:
    def __init__(self, role: str, replica: str, rc: int | None = None) -> None:
        self.role, self.replica, self.proc = role, replica, FakeProc(rc)


def _console() -> Console:
    return Console(record=True, file=io.StringIO(), width=130, force_terminal=True, color_system=None)


def _run_dir(tmp_path: Path) -> Path:
    write_config(tmp_path / "config.json", {"run": "demo", "learn": {"steps": 10, "eval": {"prompts": 8}}})
    recs = [{"event": "eval", "label": "before", "step": 0, "pass_at_1": 0.18, "prompts": 8, "missing": 0}]
    recs += [{"step": s, "policy_version": s, "reward_mean": 0.2 + 0.1 * s, "tokens_per_s": 500.0} for s in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return tmp_path


def test_render_panel_shows_progress_reward_pass_replicas_and_queues():
    state = LiveState(run="demo", run_dir="/runs/demo", total_steps=10, step=3, policy_version=3,
                      reward=0.412, reward_first=0.21, pass_at_1=0.41, pass_label="step2", pass_before=0.18,
                      processes=[("learn-0", "learn", "running"), ("rollout-0", "rollout", "running"),
                                 ("verify-0", "verify", "running"), ("verify-1", "verify", "exited 1")],
                      status=STATUS)
    progress = make_progress()
    progress.add_task("steps", total=10, completed=3)
    console = _console()
    console.print(render_panel(state, progress))
    text = console.export_text()
    assert "run demo" in text and "3/10" in text and "ETA" in text
    assert "v3" in text and "reward 0.412 (first 0.210)" in text
    assert "pass@1 41.0% [step2] before 18.0%" in text
    assert "830 tok/s, 95.0 samples/s" in text and "47.5 samples/s" in text and "draining" in text
    assert "verify-1" in text and "exited 1" in text and "no heartbeat yet" in text
    assert "TASKS 12 (lag 3, unacked 8)" in text and "ROLLOUTS 40 (lag 30, unacked 10)" in text and "DEAD 2" in text


def test_live_display_reads_run_dir_and_finishes_with_the_summary(tmp_path):
    run_dir = _run_dir(tmp_path)
    console = _console()
    display = LiveDisplay(run_dir, console=console, poll_status=False)
    display.info("nats-server on nats://127.0.0.1:1")
    display.info("[sft] step 50 greedy pass@1 0.12 [/bold]")  # text, never rich markup
    display.tick([FakeChild("learn", "learn-0"), FakeChild("rollout", "rollout-0")])
    assert display.state.total_steps == 10 and display.state.step == 3 and display.state.pass_before == 0.18
    display.error("rollout-0 is slow")
    display.finish({"steps": 3, "pass_at_1_before": 0.18, "pass_at_1_after": 0.5}, run_dir)
    text = console.export_text()
    assert "nats-server on nats://127.0.0.1:1" in text and "ERROR: rollout-0 is slow" in text
    assert "[up] [sft] step 50 greedy pass@1 0.12 [/bold]" in text
    assert "3/10" in text and "reward 0.500" in text and "waiting for NATS" in text
    assert "pass@1 before -> after" in text and "50.0%" in text and f"run dir: {run_dir}" in text


def test_eval_phases_are_inferred_from_the_records():
    s = LiveState(total_steps=2, eval_enabled=True)
    assert s.evaluating == "before RL"
    s.apply({"event": "eval", "label": "before", "step": 0, "pass_at_1": 0.1})
    s.apply({"step": 2, "policy_version": 2, "reward_mean": 0.5})
    assert s.evaluating == "after RL"
    s.apply({"event": "eval", "label": "after", "step": 2, "pass_at_1": 0.3})
    assert s.evaluating == "" and s.pass_at_1 == 0.3 and s.pass_label == "after"


class BrokenFile(io.StringIO):
    def write(self, s: str) -> int:
        raise OSError("terminal went away")


def test_a_failing_panel_falls_back_to_plain_lines(tmp_path, capsys):
    run_dir = _run_dir(tmp_path)
    display = LiveDisplay(run_dir, console=Console(file=BrokenFile(), force_terminal=True), poll_status=False)
    display.tick([FakeChild("learn", "learn-0")])  # must not raise
    display.info("still here")
    display.finish({"steps": 3}, run_dir)
    out = capsys.readouterr().out
    assert "live panel failed (OSError: terminal went away)" in out
    assert "step    3" in out and "[up] still here" in out and f"run dir: {run_dir}" in out


def _send_heartbeat(url: str) -> None:
    async def go() -> None:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=1)
        hb = Heartbeat(run="demo", role="rollout", replica="rollout-7", host="h", pid=1, sent_at=time.time(),
                       started_at=time.time(), policy_version=4, gauges={"tokens_per_s": 99.0})
        await nc.publish(RunNames("demo").status("rollout", "rollout-7"), encode(hb))
        await nc.close()

    anyio.run(go)


def test_status_poller_reports_heartbeats_from_a_real_server(tmp_path, nats_server):
    path = write_config(tmp_path / "config.json", {"run": "demo", "nats": {"url": nats_server.url},
                                                   "bus": {"heartbeat_every_s": 0.2}})
    poller = StatusPoller(path).start()

    def heard() -> dict | None:
        _send_heartbeat(nats_server.url)  # a replica beats until the poller has heard it
        return poller.latest if poller.latest and poller.latest.replicas else None

    try:
        st = wait_for(heard, timeout_s=20, what="a status poll that heard the heartbeat")
    finally:
        poller.stop()
    assert [(r.replica, r.policy_version, r.gauges) for r in st.replicas] == [("rollout-7", 4, {"tokens_per_s": 99.0})]
    assert st.streams["TASKS"].error  # no run has created its streams on this server
    state = LiveState(status=st)
    console = _console()
    console.print(render_panel(state, make_progress()))
    text = console.export_text()
    assert "rollout-7" in text and "99 tok/s" in text


def test_status_poller_never_raises_on_a_bad_config(tmp_path):
    poller = StatusPoller(tmp_path / "missing.json").start()
    poller.stop()
    assert "does not exist" in poller.error and poller.latest is None


def test_the_panel_and_status_show_the_autoscaler_count_target_backlog_and_last_decision():
    from rlvr.cli.commands.status import format_status

    scaler = {"role": "autoscale", "replica": "autoscale-verify", "state": "running", "age_s": 0.5,
              "policy_version": 0, "in_flight": 0, "counters": {"scale_ups": 1.0},
              "gauges": {"replicas": 2.0, "target": 3.0, "backlog": 140.0, "draining": 1.0,
                         "min_replicas": 1.0, "max_replicas": 4.0},
              "detail": "last change 12:00:01: up 2 -> 3: backlog 140 > 64 per replica x 2 (busy 100%)"}
    raw = msgspec.to_builtins(STATUS)
    raw["replicas"].append(scaler)
    st = msgspec.convert(raw, StatusSnapshot)
    console = _console()
    console.print(render_panel(LiveState(run="demo", status=st), make_progress(console)))
    panel = console.export_text()
    line = "verify replicas 2 (target 3, bounds 1-4, 1 draining), backlog 140"
    assert line in panel and "up 2 -> 3: backlog 140 > 64 per replica x 2" in panel
    text = format_status(st)
    assert line in text and "last change 12:00:01: up 2 -> 3" in text
