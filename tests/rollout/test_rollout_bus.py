"""The rollout role on a real nats-server: end to end, shared load, redelivery, drain.

Replicas are real ``rlvr-actor --role rollout`` processes with the ``trivial``
engine (no torch, so they start in seconds). To hold a task inside a replica
on purpose, the engine's ``hold_file`` test aid makes every generation wait
until that file exists. Nothing here sleeps to synchronise: each wait is on a
heartbeat or a stream count, under a deadline.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from rlvr.protocol import Sample, SampleGroup, Task, decode
from tests.busclient import BusClient
from tests.conftest import ActorProcs, wait_for, write_config
from tests.factories import make_task

RUN = "rb"
N = 4


def _config(tmp_path: Path, *, hold: Path | None = None, ack_wait_s: float = 30.0, inflight: int = 8) -> Path:
    engine = {"kind": "trivial", "accuracy": 0.5, "hold_file": str(hold) if hold else ""}
    return write_config(
        tmp_path / f"rollout-{ack_wait_s}-{inflight}-{bool(hold)}.json",
        {
            "run": RUN,
            "bus": {"ack_wait_s": ack_wait_s, "nak_delay_s": 0.1, "heartbeat_every_s": 0.3,
                    "drain_timeout_s": 1.0, "fetch_timeout_s": 0.5},
            "rollout": {"engine": engine, "max_inflight_tasks": inflight, "in_progress_every_s": 0.5},
            # Recorded spans, so the hop makes its own (with "none" it passes the task's on).
            "observability": {"trace_exporter": "file", "trace_dir": str(tmp_path / "traces")},
        },
    )


def _running(bus: BusClient, *replicas: str) -> None:
    for r in replicas:
        bus.wait_heartbeat(lambda hb, r=r: hb.replica == r and hb.state == "running")


def _traceparent(k: int) -> str:
    return f"00-{k + 1:032x}-{k + 1:016x}-01"


def _publish_tasks(bus: BusClient, ks: range, n: int = N) -> list[Task]:
    tasks = [make_task(RUN, k=k, prompt=f"{k}+{k}=", gold=str(2 * k), n=n) for k in ks]
    for k, task in zip(ks, tasks, strict=True):
        bus.publish(bus.names.tasks, task, msg_id=task.task_id, headers={"traceparent": _traceparent(k)})
    return tasks


def _samples(bus: BusClient, count: int, timeout_s: float = 30.0) -> list[tuple[Sample, dict[str, str]]]:
    """Wait until ROLLOUTS holds ``count`` samples (one group message per task); return each with
    the headers of its group's message."""

    def got():
        out = [(s, headers) for _, data, headers in bus.stream_messages("ROLLOUTS")
               for s in decode(data, SampleGroup).samples]
        return len(out) >= count and out

    return wait_for(got, timeout_s=timeout_s, what=f"{count} samples in ROLLOUTS")


def _tasks_drained(bus: BusClient) -> None:
    wait_for(lambda: bus.stream_count("TASKS") == 0, what="TASKS empty (every task acked)")
    info = wait_for(
        lambda: (c := bus.consumer("TASKS", "rollout")) and c.num_ack_pending == 0 and c, what="no acks pending"
    )
    assert info.num_pending == 0


def _holder(bus: BusClient, replicas: set[str]) -> str:
    """The replica that reports one task in hand."""
    return bus.wait_heartbeat(lambda hb: hb.replica in replicas and hb.in_flight == 1).replica


def _each_holds_one(bus: BusClient, replicas: set[str]) -> None:
    """Wait until every replica in ``replicas`` has reported one task in hand."""
    busy: set[str] = set()

    def seen(hb) -> bool:
        if hb.in_flight == 1:
            busy.add(hb.replica)
        return busy >= replicas

    bus.wait_heartbeat(seen)


def _by_task(samples: list[tuple[Sample, dict[str, str]]]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for s, _ in samples:
        out.setdefault(s.task_id, []).append(s)
    return out


def test_a_replica_serves_tasks_end_to_end_and_acks_after_publishing(actors: ActorProcs, nats_server, tmp_path):
    bus = BusClient(nats_server.url, RUN)
    actors.init(_config(tmp_path))  # the learner's job: a rollout only binds
    actors.start("rollout", _config(tmp_path), "rollout-0")
    _running(bus, "rollout-0")
    tasks = _publish_tasks(bus, range(6))

    samples = _samples(bus, len(tasks) * N)
    assert len(samples) == len(tasks) * N
    groups = _by_task(samples)
    assert set(groups) == {t.task_id for t in tasks}
    for k, task in enumerate(tasks):
        group = sorted(groups[task.task_id], key=lambda s: s.sample_index)
        assert [s.sample_index for s in group] == list(range(N))
        assert {s.group_id for s in group} == {task.task_id} and {s.group_size for s in group} == {N}
        assert all(s.replica == "rollout-0" and s.verifier == task.verifier and s.index == k for s in group)
        assert all(s.policy_version == 0 and s.policy_version_max == 0 for s in group)
        assert all(s.text in {str(2 * k + d) for d in (-3, -2, -1, 0, 1, 2, 3)} for s in group)
    for sample, headers in samples:
        assert headers["Nats-Msg-Id"] == f"{sample.task_id}/group"
        # The task's trace continues: same trace id, a new span (the rollout's).
        k = int(sample.task_id.rsplit("t", 1)[1])
        version, trace_id, span_id, _flags = headers["traceparent"].split("-")
        assert version == "00" and trace_id == f"{k + 1:032x}" and span_id != f"{k + 1:016x}"
    _tasks_drained(bus)
    hb = bus.wait_heartbeat(lambda hb: hb.replica == "rollout-0" and hb.counters.get("acked") == len(tasks))
    assert hb.counters["samples_total"] == len(tasks) * N and hb.policy_version == 0


def test_two_replicas_share_the_load_and_no_task_is_answered_twice(actors: ActorProcs, nats_server, tmp_path):
    bus = BusClient(nats_server.url, RUN)
    hold = tmp_path / "release"
    cfg = _config(tmp_path, hold=hold, inflight=1)
    actors.init(cfg)  # the learner's job: a rollout only binds
    actors.start("rollout", cfg, "rollout-a")
    actors.start("rollout", cfg, "rollout-b")
    _running(bus, "rollout-a", "rollout-b")
    # One task in hand each (max_inflight_tasks = 1): the load is shared by construction.
    _publish_tasks(bus, range(2))
    _each_holds_one(bus, {"rollout-a", "rollout-b"})
    hold.touch()
    tasks = _publish_tasks(bus, range(2, 24))

    samples = _samples(bus, 24 * N)
    assert len(samples) == 24 * N
    ids = [(h["Nats-Msg-Id"], s.sample_index) for s, h in samples]
    assert len(set(ids)) == len(ids)  # each sample once: one group message per task
    groups = _by_task(samples)
    assert len(groups) == 24 and {t.task_id for t in tasks} <= set(groups)
    for task_id, group in groups.items():
        assert sorted(s.sample_index for s in group) == list(range(N)), task_id
        assert len({s.replica for s in group}) == 1, f"{task_id} answered by several replicas"
    assert {g[0].replica for g in groups.values()} == {"rollout-a", "rollout-b"}
    _tasks_drained(bus)


def test_a_task_held_by_a_killed_replica_is_redelivered_and_answered_once_by_the_other(
    actors: ActorProcs, nats_server, tmp_path
):
    bus = BusClient(nats_server.url, RUN)
    hold = tmp_path / "release"
    cfg = _config(tmp_path, hold=hold, ack_wait_s=2.0, inflight=1)
    actors.init(cfg)  # the learner's job: a rollout only binds
    actors.start("rollout", cfg, "rollout-a")
    actors.start("rollout", cfg, "rollout-b")
    _running(bus, "rollout-a", "rollout-b")
    (task,) = _publish_tasks(bus, range(1))
    holder = _holder(bus, {"rollout-a", "rollout-b"})
    survivor = ({"rollout-a", "rollout-b"} - {holder}).pop()
    actors.kill(holder, signal.SIGKILL)
    actors.procs[holder].wait(timeout=10)
    hold.touch()

    samples = _samples(bus, N)
    assert len(samples) == N
    assert {s.replica for s, _ in samples} == {survivor}
    assert [h["Nats-Msg-Id"] for _, h in samples] == [f"{task.task_id}/group"] * N
    _tasks_drained(bus)
    # One stream message, delivered twice (the consumer sequence counts deliveries).
    info = bus.consumer("TASKS", "rollout")
    assert info.delivered.stream_seq == 1 and info.delivered.consumer_seq == 2
    assert bus.stream_count("ROLLOUTS") == 1  # still exactly one group message, nothing republished


def test_sigterm_exits_0_within_10s_and_the_task_in_hand_goes_to_another_replica(
    actors: ActorProcs, nats_server, tmp_path
):
    bus = BusClient(nats_server.url, RUN)
    hold = tmp_path / "release"
    cfg = _config(tmp_path, hold=hold, ack_wait_s=120.0, inflight=1)  # a timeout-driven redelivery takes 2 min
    actors.init(cfg)  # the learner's job: a rollout only binds
    actors.start("rollout", cfg, "rollout-a")
    actors.start("rollout", cfg, "rollout-b")
    _running(bus, "rollout-a", "rollout-b")
    (task,) = _publish_tasks(bus, range(1))
    holder = _holder(bus, {"rollout-a", "rollout-b"})
    survivor = ({"rollout-a", "rollout-b"} - {holder}).pop()

    t0 = time.monotonic()
    actors.kill(holder, signal.SIGTERM)
    assert actors.procs[holder].wait(timeout=10) == 0
    assert time.monotonic() - t0 < 10
    assert "naked_on_stop" in actors.log_text(holder)
    # Nothing lost: nak'ed, so the survivor holds it now (its generation waits on the file).
    assert bus.stream_count("ROLLOUTS") == 0 and bus.stream_count("DEAD") == 0
    _holder(bus, {survivor})
    assert bus.stream_count("TASKS") == 1
    hold.touch()

    samples = _samples(bus, N)
    assert {s.replica for s, _ in samples} == {survivor} and len(samples) == N
    assert sorted(s.sample_index for s, _ in samples) == list(range(N))
    assert time.monotonic() - t0 < 60  # well inside ack_wait (120 s): nak'ed, not timed out
    _tasks_drained(bus)
