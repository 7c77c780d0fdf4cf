"""The live terminal panel of ``rlvr-actor up`` (``--display live``, the
default on a TTY).

One compact panel, redrawn on every ``tick`` of the launcher:

- a progress bar over the RL steps with elapsed time and ETA (the total is
  ``learn.steps`` from ``<run_dir>/config.json``);
- the policy version, the current reward and the last held-out pass@1
  (from the learner's ``metrics.jsonl``);
- for a run of episodes, how they ended over the run (every end reason,
  dropped episodes too), the tools' errors and the template rewrites;
- one row per replica: state, policy version, work in flight and throughput
  (from heartbeats), or the process state while none has been heard;
- queue depths: messages per stream, and lag / unacked per durable consumer;
- with an autoscaler, its replica count, target, backlog and last decision.

Heartbeats and stream info come from ``rlvr.cli.commands.status.collect_status``,
run every couple of seconds in a background thread against the run's NATS
URL (``nats.url`` in config.json), so a slow or absent server never blocks
the launcher. Messages from ``info``/``error`` are printed above the panel.

The panel must never break a run: any error while drawing switches the
display to ``PlainDisplay`` lines for the rest of the run, and says so once.
Full logs are in ``<run_dir>/logs`` already; this module only shows a view.

Not covered: what a non-TTY shows (``rlvr.cli.ui.display``), the summary
table's contents (``format_summary``) and plots (``rlvr.cli.commands.report``).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from rlvr.cli.commands.status import DURABLES as QUEUES
from rlvr.cli.commands.status import ConsumerStatus, StatusSnapshot, StreamStatus, autoscale_summary
from rlvr.cli.ui.display import PlainDisplay, episode_ends, format_progress, format_record, format_summary


@dataclass
class LiveState:
    """Everything the panel shows; ``render_panel`` is a pure function of it."""

    run: str = ""
    run_dir: str = ""
    total_steps: int | None = None
    step: int = 0
    policy_version: int = 0
    reward: float | None = None
    reward_first: float | None = None
    pass_at_1: float | None = None
    pass_label: str = ""
    pass_before: float | None = None
    tokens_per_s: float | None = None
    eval_enabled: bool = False  # learn.eval.prompts > 0
    eval_labels: set[str] = field(default_factory=set)
    # (replica, role, process state) from the launcher's children.
    processes: list[tuple[str, str, str]] = field(default_factory=list)
    status: StatusSnapshot | None = None  # the last collect_status result
    alarms: dict[str, str] = field(default_factory=dict)  # kind/verifier -> message, from metrics.jsonl
    episodes: str = ""  # the run's episode ends, tool errors and template rewrites (display.episode_ends)
    waiting: str = ""  # the last progress line while no step comes
    status_error: str = ""

    @property
    def evaluating(self) -> str:
        """The evaluation the learner is in now, inferred from the records so far."""
        if not self.eval_enabled:
            return ""
        if self.step == 0 and "before" not in self.eval_labels:
            return "before RL"
        if self.total_steps and self.step >= self.total_steps and "after" not in self.eval_labels:
            return "after RL"
        return ""

    def apply(self, rec: dict) -> None:
        """Fold one metrics.jsonl record in."""
        if rec.get("event") == "alarm":
            self.alarms[f"{rec.get('kind')}/{rec.get('verifier')}"] = str(rec.get("message", ""))
            return
        if rec.get("event") == "alarm_cleared":
            self.alarms.pop(f"{rec.get('kind')}/{rec.get('verifier')}", None)
            return
        self.episodes = episode_ends(rec) or self.episodes  # step and progress records carry the run totals
        if rec.get("event") == "progress":
            self.waiting = format_progress(rec, episodes=False)  # the panel shows them on a line of their own
            return
        if rec.get("event") == "eval":
            self.eval_labels.add(str(rec.get("label", "")))
            if isinstance(rec.get("pass_at_1"), (int, float)):
                self.pass_at_1 = float(rec["pass_at_1"])
                self.pass_label = str(rec.get("label", ""))
                if rec.get("label") == "before":
                    self.pass_before = self.pass_at_1
            return
        if isinstance(rec.get("step"), (int, float)):
            self.step = int(rec["step"])
            self.waiting = ""
        self.policy_version = int(rec.get("policy_version", self.policy_version))
        if isinstance(rec.get("reward_mean"), (int, float)):
            self.reward = float(rec["reward_mean"])
            if self.reward_first is None:
                self.reward_first = self.reward
        if isinstance(rec.get("tokens_per_s"), (int, float)):
            self.tokens_per_s = float(rec["tokens_per_s"])


def make_progress(console: Console | None = None) -> Progress:
    # A long speed window: RL steps can take minutes each, and rich's default
    # (30 s) would then show no ETA at all.
    return Progress(
        TextColumn("[bold]RL steps"), BarColumn(bar_width=None), MofNCompleteColumn(),
        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
        console=console, speed_estimate_period=3600.0, expand=True,
    )


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _rate(role: str, gauges: dict[str, Any]) -> str:
    parts = []
    if gauges.get("tokens_per_s"):
        parts.append(f"{gauges['tokens_per_s']:.0f} tok/s")
    if gauges.get("samples_per_s"):
        parts.append(f"{gauges['samples_per_s']:.1f} samples/s")
    if role == "learn" and "step" in gauges:
        parts.append(f"step {gauges['step']:.0f}")
    return ", ".join(parts) or "-"


def _headline(s: LiveState) -> Text:
    t = Text()
    t.append("policy ", style="dim").append(f"v{s.policy_version}", style="bold")
    t.append("   reward ", style="dim").append("n/a" if s.reward is None else f"{s.reward:.3f}", style="bold")
    if s.reward_first is not None and s.reward is not None:
        t.append(f" (first {s.reward_first:.3f})", style="dim")
    t.append("   pass@1 ", style="dim").append(_pct(s.pass_at_1), style="bold green")
    if s.pass_label:
        t.append(f" [{s.pass_label}]", style="dim")
    if s.pass_before is not None and s.pass_label != "before":
        t.append(f" before {_pct(s.pass_before)}", style="dim")
    if s.tokens_per_s:
        t.append("   learner ", style="dim").append(f"{s.tokens_per_s:.0f} tok/s")
    return t


def _replica_table(s: LiveState) -> Table:
    table = Table(box=None, pad_edge=False, expand=True, header_style="dim")
    for col in ("replica", "role", "state", "policy", "in flight", "throughput", "seen"):
        table.add_column(col, no_wrap=True)
    beats = {r.replica: r for r in s.status.replicas} if s.status else {}
    rows: list[tuple[str, str]] = [(replica, role) for replica, role, _ in s.processes]
    rows += [(r, b.role) for r, b in beats.items() if r not in {x for x, _ in rows}]
    proc_state = {replica: state for replica, _, state in s.processes}
    for replica, role in rows:
        b = beats.get(replica)
        if b is None:
            cells = (replica, role, proc_state.get(replica, "?"), "-", "-", "-", "no heartbeat yet")
        else:
            state = b.state if proc_state.get(replica, "running") == "running" else proc_state[replica]
            cells = (replica, role, state, f"v{b.policy_version}", str(b.in_flight),
                     _rate(role, b.gauges), f"{b.age_s:.0f}s ago")
        table.add_row(*(Text(c) for c in cells))  # plain text: ids are never rich markup
    return table


def _queues(s: LiveState) -> Text:
    t = Text("queues  ", style="dim")
    if s.status is None:
        t.append(s.status_error or "waiting for NATS ...", style="yellow" if s.status_error else "dim")
        return t
    streams, consumers = s.status.streams, s.status.consumers
    for stream, durable in QUEUES:
        info, ci = streams.get(stream, StreamStatus()), consumers.get(durable, ConsumerStatus())
        t.append(f"{stream} ", style="bold")
        t.append(str(info.messages if info.messages is not None else "-"))
        if ci.lag is not None:
            t.append(f" (lag {ci.lag}, unacked {ci.ack_pending})", style="dim")
        t.append("   ")
    dead = streams.get("DEAD", StreamStatus()).messages
    t.append("DEAD ", style="bold").append(str(dead if dead is not None else "-"), style="red" if dead else "")
    if s.status_error:
        t.append(f"   (last poll failed: {s.status_error})", style="yellow")
    return t


def _autoscale(s: LiveState) -> list[Text]:
    """The autoscaler's line and its last decision, from its heartbeat."""
    out = []
    for r in s.status.replicas if s.status else []:
        if r.role == "autoscale":
            t = Text("autoscale  ", style="dim").append(autoscale_summary(r), style="bold")
            out.append(t)
            if r.detail:
                out.append(Text(f"  {r.detail}", style="dim"))
    return out


def render_panel(s: LiveState, progress: Progress) -> Panel:
    """The whole panel for one state (pure: no I/O)."""
    title = f"rlvr-actor up · run {s.run or '?'}"
    parts = [progress, _headline(s), _replica_table(s), _queues(s), *_autoscale(s)]
    if s.evaluating:
        parts.insert(2, Text(f"held-out evaluation {s.evaluating} ...", style="cyan"))
    if s.episodes:
        parts.insert(2, Text("episodes ended  ", style="dim").append(s.episodes))
    if s.waiting:
        parts.append(Text(f"waiting: {s.waiting}", style="yellow"))
    parts += [Text(f"ALARM {message}", style="bold red") for message in s.alarms.values()]
    return Panel(Group(*parts), title=Text(title), subtitle=Text(s.run_dir), title_align="left", subtitle_align="right")


class StatusPoller:
    """``collect_status`` every ``period_s`` in a daemon thread; the latest
    result (or error) is read by the display. It never raises."""

    def __init__(self, config_file: Path) -> None:
        self.config_file = config_file
        self.latest: StatusSnapshot | None = None
        self.latest_at: float | None = None
        self.error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="live-status", daemon=True)

    def start(self) -> StatusPoller:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _main(self) -> None:
        try:
            import anyio

            from rlvr.actors.config import SharedSections, convert_config, read_config
            from rlvr.cli.commands.status import collect_status

            # Only the shared sections: this view never imports a role's config.
            raw, source = read_config(self.config_file)
            cfg = convert_config(raw, SharedSections, source)
            # Listen a little longer than one heartbeat period, to hear everyone.
            wait_s = cfg.bus.heartbeat_every_s + 0.3
        except Exception as e:  # noqa: BLE001 - a view must not take the run down
            self.error = f"{type(e).__name__}: {e}"
            return
        while not self._stop.is_set():
            try:
                self.latest = anyio.run(collect_status, cfg.run, cfg.nats, wait_s)
                self.latest_at = time.monotonic()
                self.error = ""
            except Exception as e:  # noqa: BLE001 - e.g. the server not up yet, or gone
                self.error = type(e).__name__
                self._stop.wait(1.0)


class LiveDisplay:
    """Same interface as ``PlainDisplay``: ``info``, ``error``, ``tick``, ``finish``."""

    def __init__(self, run_dir: Path, *, console: Console | None = None, poll_status: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.console = console or Console()
        self.state = LiveState(run_dir=str(self.run_dir))
        self.progress = make_progress(self.console)
        self._task = None
        self._plain = PlainDisplay(self.run_dir)  # reads metrics.jsonl; the fallback too
        self._failed = False
        self._live = None
        self._poll_status = poll_status
        self._poller: StatusPoller | None = None
        # Records read but not yet drawn; printed as plain lines if drawing fails.
        self._undrawn: list[dict] = []

    # --- the PlainDisplay interface ------------------------------------------------
    def info(self, text: str) -> None:
        if self._failed:
            return self._plain.info(text)
        try:
            self.console.print(f"[dim]\\[up][/dim] {escape(text)}", highlight=False)
        except Exception as e:  # noqa: BLE001
            self._fall_back(e)
            self._plain.info(text)

    def error(self, text: str) -> None:
        if self._failed:
            return self._plain.error(text)
        try:
            self.console.print(f"[bold red]\\[up] ERROR:[/bold red] {escape(text)}", highlight=False)
        except Exception as e:  # noqa: BLE001
            self._fall_back(e)
            self._plain.error(text)

    def tick(self, children) -> None:
        if self._failed:
            return self._plain.tick(children)
        try:
            self._update(children)
            if self._live is None:
                from rich.live import Live

                self._live = Live(self._panel(), console=self.console, auto_refresh=False,
                                  redirect_stdout=False, redirect_stderr=False, transient=False)
                self._live.start()
            self._live.update(self._panel(), refresh=True)
            self._undrawn = []
        except Exception as e:  # noqa: BLE001 - never crash the run over a view
            self._fall_back(e)

    def finish(self, summary: dict, run_dir: Path) -> None:
        if self._poller is not None:
            # The server is gone by now: keep the last status it gave, not the
            # connection error the next poll would report.
            self._poller.stop()
            self._poller = None
        if not self._failed:
            try:
                self._update([])
                if self._live is not None:
                    self._live.update(self._panel(), refresh=True)
                    self._live.stop()
                self.console.print(format_summary(summary), highlight=False, markup=False)
                self.console.print(f"[up] run dir: {run_dir}", highlight=False, markup=False)
                return
            except Exception as e:  # noqa: BLE001
                self._fall_back(e)
        self._plain.finish(summary, run_dir)

    # --- internals ---------------------------------------------------------------------
    def _panel(self) -> Panel:
        return render_panel(self.state, self.progress)

    def _update(self, children) -> None:
        self._read_config()
        records = self._plain.new_metrics()
        self._undrawn += records
        for rec in records:
            self.state.apply(rec)
            if rec.get("event") == "alarm":  # said in full once, above the panel; the panel keeps a line
                self.console.print(format_record(rec), style="bold red", highlight=False, markup=False)
        if children:
            self.state.processes = [
                (c.replica, c.role, "running" if c.proc.poll() is None else f"exited {c.proc.returncode}")
                for c in children
            ]
        if self._poller is not None:
            self.state.status = self._poller.latest or self.state.status
            self.state.status_error = self._poller.error
        if self._task is not None:
            self.progress.update(self._task, completed=self.state.step)

    def _read_config(self) -> None:
        """Once ``up`` has written config.json: the step total, run id, NATS poller."""
        if self._task is not None:
            return
        path = self.run_dir / "config.json"
        if not path.is_file():
            return
        cfg = json.loads(path.read_text())
        self.state.run = cfg.get("run", "")
        learn = cfg.get("learn", {})
        self.state.total_steps = int(learn.get("steps", 0)) or None
        self.state.eval_enabled = int(learn.get("eval", {}).get("prompts", 0)) > 0
        self._task = self.progress.add_task("steps", total=self.state.total_steps, completed=self.state.step)
        if self._poll_status:
            self._poller = StatusPoller(path).start()

    def _fall_back(self, exc: BaseException) -> None:
        """Stop drawing; from now on every call is a PlainDisplay line."""
        self._failed = True
        try:
            if self._live is not None:
                self._live.stop()
        except Exception:  # noqa: BLE001 - the terminal may be gone; plain lines still work
            pass
        self._plain.info(f"live panel failed ({type(exc).__name__}: {exc}); plain progress lines from here")
        for rec in self._undrawn:
            print(format_record(rec), flush=True)
        self._undrawn = []


__all__ = ["LiveDisplay", "LiveState", "StatusPoller", "make_progress", "render_panel"]
