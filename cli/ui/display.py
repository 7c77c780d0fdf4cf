"""What ``rlvr-actor up`` shows while a run goes.

- ``plain``: one line per optimizer step and per evaluation, read from the
  learner's ``metrics.jsonl`` (CI logs stay readable).
- ``logs``: every child's log lines, prefixed with the replica.
- ``live``: one compact panel (rich) on a TTY; see ``rlvr.cli.ui.live``.
- ``auto``: ``live`` on a TTY, ``plain`` otherwise.

Full logs always go to ``<run_dir>/logs``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


class PlainDisplay:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._metrics_pos = 0

    def info(self, text: str) -> None:
        print(f"[up] {text}", flush=True)

    def error(self, text: str) -> None:
        print(f"[up] ERROR: {text}", file=sys.stderr, flush=True)

    def new_metrics(self) -> list[dict]:
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return []
        with open(path) as f:
            f.seek(self._metrics_pos)
            chunk = f.read()
        complete = chunk[: chunk.rfind("\n") + 1]
        self._metrics_pos += len(complete.encode())
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def tick(self, children) -> None:
        for rec in self.new_metrics():
            print(format_record(rec), flush=True)

    def finish(self, summary: dict, run_dir: Path) -> None:
        self.tick([])
        print(format_summary(summary), flush=True)
        print(f"[up] run dir: {run_dir}", flush=True)


class LogsDisplay(PlainDisplay):
    def __init__(self, run_dir: Path) -> None:
        super().__init__(run_dir)
        self._pos: dict[Path, int] = {}

    def tick(self, children) -> None:
        for c in children:
            pos = self._pos.get(c.log_path, 0)
            with open(c.log_path, "rb") as f:
                f.seek(pos)
                chunk = f.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self._pos[c.log_path] = pos + len(complete)
            for line in complete.decode(errors="replace").splitlines():
                print(f"{c.replica:<10} | {line}", flush=True)


def format_record(rec: dict) -> str:
    if rec.get("event") == "alarm":
        lines = [f"[alarm] {rec.get('message', '')}"]
        for ex in rec.get("examples", []):
            lines.append(f"  {ex.get('outcome')} reward {ex.get('reward')}: {ex.get('completion', '')!r}"
                         f" -> extracted {ex.get('extracted')!r} ({ex.get('detail', '')})")
        return "\n".join(lines)
    if rec.get("event") == "alarm_cleared":
        who = f" ({rec['verifier']})" if rec.get("verifier") else ""
        return f"[alarm cleared] {rec.get('kind')}{who} after {float(rec.get('seconds') or 0):.0f}s"
    if rec.get("event") == "progress":
        return "[waiting] " + format_progress(rec)
    if rec.get("event") == "eval":
        ks = "  ".join(f"{k}={rec[k]:.3f}" for k in sorted(rec) if k.startswith("pass_at_"))
        return f"[eval {rec['label']}] step {rec.get('step', 0)}  {ks}  prompts={rec['prompts']} missing={rec['missing']}"
    parts = [f"step {rec['step']:>4}", f"v{rec.get('policy_version', 0)}"]
    for key, fmt in (("reward_mean", "reward {:.3f}"), ("loss", "loss {:+.4f}"), ("kl", "kl {:.4f}"),
                     ("entropy", "entropy {:.3f}"), ("response_len_mean", "len {:.1f}"),
                     ("zero_variance_share", "zero-var {:.2f}"), ("staleness_mean", "stale {:.2f}"),
                     ("wait_s", "wait {:.2f}s"), ("train_s", "train {:.2f}s")):
        if key in rec:
            parts.append(fmt.format(rec[key]))
    return "  ".join(parts)


def format_progress(rec: dict, episodes: bool = True) -> str:
    """A progress record (no step for a while): what was scored, and why it was dropped, naming
    what the failed verifications were (``verify_failed=5 (timeout=4, error=1)``)."""
    drops = "  ".join(f"{k.removeprefix('drop_')}={int(v)}{_failed_by(rec) if k == 'drop_verify_failed' else ''}"
                      for k, v in sorted(rec.items()) if k.startswith("drop_") and v)
    ends = episode_ends(rec) if episodes else ""
    return (f"no step for {rec.get('seconds_since_step', 0):.0f}s: {rec.get('groups_seen', 0)} groups "
            f"scored, {rec.get('groups_kept', 0)} kept; samples scored {rec.get('scored', 0)}, trained "
            f"{rec.get('trained', 0)}, in flight {rec.get('in_flight', 0)}; dropped: {drops or 'none'}"
            + (f"; episodes ended: {ends}" if ends else ""))


# The verdict outcomes a verify_failed drop is made of (rlvr.learner.custody.groups.VERIFY_FAILED).
_VERIFY_FAILED = ("timeout", "sandbox_error", "error")


def _failed_by(rec: dict) -> str:
    """What the failed verifications were, from the run's outcome totals: `` (timeout=3, error=1)``."""
    parts = [f"{o}={int(rec[f'outcome_{o}'])}" for o in _VERIFY_FAILED if rec.get(f"outcome_{o}")]
    return f" ({', '.join(parts)})" if parts else ""


def episode_ends(rec: dict) -> str:
    """A record's run totals of episode ends, tool errors and template rewrites, in one line
    (empty for a run without episodes)."""
    ends = sorted(((k.removeprefix("run_episode_end_"), int(v)) for k, v in rec.items()
                   if k.startswith("run_episode_end_") and v), key=lambda kv: -kv[1])
    if not ends:
        return ""
    errors = sum(int(v) for k, v in rec.items() if k.startswith("run_tool_errors_"))
    return (" ".join(f"{k}={v}" for k, v in ends) + f"  tool errors {errors}"
            f"  template rewrites {int(rec.get('run_template_rewrites', 0))}")


def format_summary(s: dict) -> str:
    from rlvr.cli.commands.report import format_report  # stdlib only at import

    return "\n".join(["", "summary", format_report(s), f"  {'exit code':<23}  {s.get('exit_code')}"])




def make_display(mode: str, run_dir: Path):
    if mode == "auto":
        mode = "live" if sys.stdout.isatty() else "plain"
    if mode == "live":
        try:
            from rlvr.cli.ui.live import LiveDisplay

            return LiveDisplay(run_dir)
        except ImportError:
            mode = "plain"
    return LogsDisplay(run_dir) if mode == "logs" else PlainDisplay(run_dir)
