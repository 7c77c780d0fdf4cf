"""Experiment trackers users already watch: Weights & Biases and MLflow, fed the
records ``metrics.jsonl`` holds (step metrics, eval rounds, alarms), the
resolved config once at start, and a small table of samples every few steps.

Each tracker runs on a thread of its own behind a bounded queue, so a slow
server or a client that retries for minutes never holds the learner's event
loop (which renews its lease). A tracker that fails (import, network, disk) is
turned off and says so once: a warning in the log and one ``tracker_disabled``
alarm record, which ``MetricsWriter`` writes to ``metrics.jsonl`` and the other
trackers; training goes on. ``wandb`` and ``mlflow`` are imported on that
thread, and only when configured: a learner without trackers never loads them,
and no other role imports this module.

``close`` returns once each tracker holds what it was sent: W&B's ``run.finish``
only asks its service (wandb-core) to close the run, which writes the run's
last block (its offline file: every row, for a small run) after ``finish``
returns, so the sink also waits for the service to end (``wandb.teardown``).
It waits for a tracker as long as it progresses (``CLOSE_STUCK_S`` without a
call done, ``CLOSE_WAIT_S`` in all); one given up is turned off like a failed
one, naming the records it never sent (they die with the process).

Not covered: continuing one tracker run across learner restarts (each start is
a new tracker run; ``metrics.jsonl`` is the record that spans them).
"""

from __future__ import annotations

import json
import os
import queue
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.actors.logs import get_logger
from rlvr.actors.secrets import redact, redact_tree, register_secret
from rlvr.learner.watch.alarms import Alarm
from rlvr.learner.config import MlflowConfig, TrackersConfig, WandbConfig

if TYPE_CHECKING:
    from rlvr.protocol import Scored

log = get_logger("rlvr.learner.watch.sinks")

# Records a tracker may fall behind by before it counts as failed (about an hour of fast steps).
QUEUE_RECORDS = 4096
# Seconds ``close`` waits for a tracker that makes no progress: longer than one call may take (wandb.init gives
# its service 90 s, and took over 60 s on 2 busy cores), so only a tracker stuck in one call is given up.
CLOSE_STUCK_S = 120.0
# Seconds ``close`` waits in all, however a tracker progresses (4096 records behind, online).
CLOSE_WAIT_S = 600.0
_SAMPLE_COLUMNS = ("step", "group_id", "prompt", "completion", "reward", "outcome", "verifier", "policy_version")


def numbers(record: dict[str, Any], skip: tuple[str, ...] = ("step",)) -> dict[str, float]:
    """The numeric fields of a record, as floats (strings, lists and ``skip`` left out)."""
    return {k: float(v) for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in skip}


def sample_rows(step: int, groups: list[list[Scored]], n: int, chars: int) -> list[dict[str, Any]]:
    """Up to ``n`` samples of a step, spread evenly over its groups, as table rows."""
    samples = [s for g in groups for s in g]
    picked = samples[:: max(1, len(samples) // n)][:n]
    return [{"step": step, "group_id": s.sample.group_id, "prompt": _prompt_text(s.sample.prompt)[:chars],
             "completion": s.sample.text[:chars], "reward": s.verdict.reward, "outcome": s.verdict.outcome,
             "verifier": s.verdict.verifier, "policy_version": s.sample.policy_version} for s in picked]


def _prompt_text(prompt: Any) -> str:
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m.role}: {m.content}" for m in prompt)


class Trackers:
    """The configured trackers, each on its own thread. ``record`` and ``samples``
    never block and never raise; ``notices`` holds the alarm record of each
    tracker that was turned off, for ``MetricsWriter`` to write."""

    def __init__(self, cfg: TrackersConfig, *, out_dir: Path, run_name: str, resolved_config: bytes = b"") -> None:
        self.cfg = cfg
        config = redact_tree(json.loads(resolved_config)) if resolved_config else {}
        name = run_name or out_dir.name
        sinks: list[Any] = []
        if cfg.wandb is not None:
            sinks.append(WandbSink(cfg.wandb, out_dir=out_dir, run_name=name, config=config))
        if cfg.mlflow is not None:
            sinks.append(MlflowSink(cfg.mlflow, run_name=name, config=config))
        self.notices: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._workers = [_Worker(s, self.notices) for s in sinks]
        self._step = 0  # the last step written: alarms carry none of their own
        self._alarms: dict[str, int] = {}
        for w in self._workers:
            w.thread.start()

    @property
    def enabled(self) -> bool:
        return bool(self._workers)

    def record(self, record: dict[str, Any]) -> None:
        """One metrics.jsonl record: a step's metrics, an eval round or an alarm (others are not sent)."""
        event = record.get("event")
        if event is None and isinstance(record.get("step"), int):
            self._step = record["step"]
            self._submit("step", self._step, numbers(record))
        elif event == "eval":
            values = {f"eval/{k}": v for k, v in numbers(record, skip=("step", "finished_at")).items()}
            self._submit("step", int(record.get("step", self._step)), values)
        elif event == "alarm":
            kind = str(record.get("kind", ""))
            self._alarms[kind] = self._alarms.get(kind, 0) + 1
            self._submit("alarm", self._step, kind, str(record.get("message", "")), self._alarms[kind])

    def samples(self, step: int, groups: list[list[Scored]]) -> None:
        """A sample table every ``samples_every`` steps."""
        every = self.cfg.samples_every
        if self._workers and every and step % every == 0:
            self._submit("samples", step, sample_rows(step, groups, self.cfg.samples_per_table, self.cfg.sample_chars))

    def close(self, wait_s: float = CLOSE_WAIT_S, stuck_s: float = CLOSE_STUCK_S) -> None:
        """Finish every tracker's run: wait while it progresses, ``stuck_s`` at most without a call
        done and ``wait_s`` at most in all."""
        deadline = time.monotonic() + wait_s
        for w in self._workers:
            w.stop()
        for w in self._workers:
            while w.thread.is_alive():
                now = time.monotonic()
                if now >= deadline or now - w.progress_at >= stuck_s:
                    why = f"still busy after {wait_s:g}s" if now >= deadline else f"stuck {stuck_s:g}s in one call"
                    # Its queue dies with the process: said, and counted.
                    w.fail("close", f"{why}; {w.unsent()} records never sent")
                    break
                w.thread.join(min(1.0, deadline - now))

    def _submit(self, method: str, *args: Any) -> None:
        for w in self._workers:
            w.submit(method, args)


class _Worker:
    """One tracker's thread: opens it, applies its calls in order, and turns it
    off at the first exception (said once; later calls are dropped)."""

    def __init__(self, sink: Any, notices: queue.SimpleQueue[dict[str, Any]]) -> None:
        self.sink = sink
        self.notices = notices
        self.failed = False
        self._fail_lock = threading.Lock()  # the learner's thread (a full queue) and this one may both fail it
        self.calls: queue.Queue[tuple[str, tuple] | None] = queue.Queue(QUEUE_RECORDS)
        self.progress_at = time.monotonic()  # when its last call ended (``close`` waits while it moves)
        self.thread = threading.Thread(target=self._run, name=f"tracker-{sink.name}", daemon=True)

    def submit(self, method: str, args: tuple) -> None:
        if self.failed:
            return
        try:
            self.calls.put_nowait((method, args))
        except queue.Full:
            self.fail(method, f"fell {QUEUE_RECORDS} records behind the learner")

    def unsent(self) -> int:
        """Calls still queued (``stop``'s end marker aside)."""
        with self.calls.mutex:
            return sum(c is not None for c in self.calls.queue)

    def stop(self) -> None:
        try:
            self.calls.put(None, timeout=5.0)  # a failed worker empties its queue at once
        except queue.Full:
            pass  # stuck in a call: close() stops waiting for it at its deadline

    def _run(self) -> None:
        call: tuple[str, tuple] | None = ("open", ())
        while call is not None:
            if not self.failed:
                method, args = call
                try:
                    getattr(self.sink, method)(*args)
                except Exception as e:  # any fault of the tracker: it goes off, training does not
                    self.fail(method, f"{type(e).__name__}: {e}")
            self.progress_at = time.monotonic()
            call = self.calls.get()
        try:  # a failed tracker too: its run is marked ended where the tracker still answers
            self.sink.close()
        except Exception as e:
            self.fail("close", f"{type(e).__name__}: {e}")

    def fail(self, during: str, error: str) -> None:
        with self._fail_lock:
            if self.failed:
                return
            self.failed = True
        error = redact(error)[:2000]
        log.warning("tracker_disabled", tracker=self.sink.name, during=during, error=error)
        message = (f"{self.sink.title} tracker turned off ({during} failed: {error}); "
                   "metrics.jsonl and the other trackers go on")
        self.notices.put({**Alarm("tracker_disabled", "", message, {}, []).record(), "tracker": self.sink.name})


class WandbSink:
    name, title = "wandb", "W&B"

    def __init__(self, cfg: WandbConfig, *, out_dir: Path, run_name: str, config: dict[str, Any]) -> None:
        self.cfg = cfg
        self.dir = Path(cfg.dir) if cfg.dir else out_dir
        self.run_name = run_name
        self.config = config
        self.run: Any = None

    def open(self) -> None:
        register_secret(os.environ.get("WANDB_API_KEY", ""))  # never in a log line, whatever prints it
        import wandb

        self.dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=self.cfg.project, entity=self.cfg.entity or None, name=self.run_name, mode=self.cfg.mode,
            dir=str(self.dir), config=self.config, tags=list(self.cfg.tags), reinit="create_new",
            # No console capture: the learner's own logs stay where they are.
            settings=wandb.Settings(console="off", silent=True),
        )

    def step(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def alarm(self, step: int, kind: str, message: str, count: int) -> None:
        self.run.log({f"alarms/{kind}": count}, step=step)
        self.run.summary[f"alarm/{kind}"] = message

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        import wandb

        table = wandb.Table(columns=list(_SAMPLE_COLUMNS), data=[[r[c] for c in _SAMPLE_COLUMNS] for r in rows])
        self.run.log({"sample_table": table}, step=step)  # "samples" is a step metric

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
            import wandb

            # finish() returns once wandb-core has the exit record; the run's file is written when the
            # service closes it, later (an offline run read at once lacked every row under load). The
            # learner is the only W&B user in its process: ending the service is waiting for the file.
            try:
                wandb.teardown()
            except SystemExit as e:  # wandb's way of saying its service failed: not this thread's exit
                raise RuntimeError(f"wandb-core exited with code {e.code}") from None


class MlflowSink:
    name, title = "mlflow", "MLflow"
    _BATCH = 1000  # metrics per log_batch call (MLflow's limit)
    _PARAMS = 100  # params per log_batch call
    _PARAM_CHARS = 6000  # a param value's length limit

    def __init__(self, cfg: MlflowConfig, *, run_name: str, config: dict[str, Any]) -> None:
        self.cfg = cfg
        self.run_name = run_name
        self.config = config
        self.client: Any = None
        self.run_id = ""

    def open(self) -> None:
        for key in ("MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
            register_secret(os.environ.get(key, ""))
        if self.cfg.tracking_uri.startswith("file:"):
            # MLflow 3 keeps the file store in maintenance mode and refuses it unless asked;
            # a `file:` URI in this config is that ask.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=self.cfg.tracking_uri or None)
        exp = self.client.get_experiment_by_name(self.cfg.experiment)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(self.cfg.experiment)
        self.run_id = self.client.create_run(exp_id, run_name=self.run_name).info.run_id
        if self.config:
            params = [Param(k, v[: self._PARAM_CHARS]) for k, v in _flatten(self.config).items()]
            for i in range(0, len(params), self._PARAMS):
                self.client.log_batch(self.run_id, params=params[i : i + self._PARAMS])
            self.client.log_text(self.run_id, json.dumps(self.config, indent=2), "config.json")

    def step(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(_metric_key(k), v, now, step) for k, v in values.items()]
        for i in range(0, len(metrics), self._BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[i : i + self._BATCH])

    def alarm(self, step: int, kind: str, message: str, count: int) -> None:
        self.step(step, {f"alarms/{kind}": float(count)})
        self.client.set_tag(self.run_id, f"alarm.{_metric_key(kind)}", message[:5000])

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        data = {c: [r[c] for r in rows] for c in _SAMPLE_COLUMNS}
        self.client.log_table(self.run_id, data=data, artifact_file=f"samples/step_{step:07d}.json")

    def close(self) -> None:
        if self.run_id:
            self.client.set_terminated(self.run_id)
            self.run_id = ""


def _metric_key(key: str) -> str:
    """MLflow takes letters, digits, ``_ - . /`` and spaces in a name; anything else becomes ``_``."""
    return re.sub(r"[^\w\-./ ]", "_", key)


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"learn": {"steps": 10}}`` -> ``{"learn.steps": "10"}`` (lists as JSON)."""
    out: dict[str, str] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{key}."))
        else:
            out[_metric_key(key)] = v if isinstance(v, str) else json.dumps(v)
    return out
