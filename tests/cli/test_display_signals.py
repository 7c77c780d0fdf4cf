"""What `up` shows of a run's signals: progress lines name what the failed verifications were, an
alarm that clears says so (and leaves the live panel), and the panel shows how episodes ended."""

from __future__ import annotations

import io

from rich.console import Console

from rlvr.cli.ui.display import format_record
from rlvr.cli.ui.live import LiveState, make_progress, render_panel


def test_a_progress_line_names_timeouts_among_the_failed_verifications():
    rec = {"event": "progress", "step": 0, "seconds_since_step": 31, "groups_seen": 9, "groups_kept": 0,
           "scored": 36, "trained": 0, "in_flight": 4, "drop_verify_failed": 30, "drop_zero_variance": 6,
           "outcome_timeout": 28, "outcome_error": 2, "outcome_sandbox_error": 0, "outcome_wrong": 6}
    line = format_record(rec)
    assert line.startswith("[waiting] no step for 31s")
    assert "verify_failed=30 (timeout=28, error=2)" in line and "zero_variance=6" in line
    assert "sandbox_error" not in line  # none of those: not named
    ended = format_record({**rec, "run_episode_end_done": 3, "run_episode_end_prompt_cap": 5,
                           "run_tool_errors_calculator": 2, "run_template_rewrites": 0})
    assert "episodes ended: prompt_cap=5 done=3  tool errors 2  template rewrites 0" in ended


def test_a_cleared_alarm_is_said_once_and_leaves_the_panel():
    raised = {"event": "alarm", "kind": "flat_reward", "verifier": "math", "message": "flat reward: 22 of 24",
              "outcomes": {}, "examples": []}
    cleared = {"event": "alarm_cleared", "kind": "flat_reward", "verifier": "math", "message": "flat reward: 22 of 24",
               "seconds": 95.4}
    assert format_record(cleared) == "[alarm cleared] flat_reward (math) after 95s"
    state = LiveState(run="demo")
    state.apply(raised)
    assert list(state.alarms) == ["flat_reward/math"]
    state.apply(cleared)
    assert state.alarms == {}


def test_the_panel_shows_the_run_s_episode_ends():
    state = LiveState(run="demo")
    state.apply({"step": 3, "policy_version": 1, "reward_mean": 0.4, "run_episode_end_done": 40,
                 "run_episode_end_template_rewrite": 2, "run_tool_errors_python": 1, "run_template_rewrites": 2})
    state.apply({"event": "eval", "label": "step3", "pass_at_1": 0.5})  # a record without totals keeps the line
    console = Console(record=True, file=io.StringIO(), width=130, force_terminal=True, color_system=None)
    console.print(render_panel(state, make_progress(console)))
    text = console.export_text()
    assert "episodes ended  done=40 template_rewrite=2  tool errors 1  template rewrites 2" in text
