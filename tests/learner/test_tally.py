"""The run's totals: the summary's "pass rate by verifier" is the run's, not the last step's, and
episode end reasons, tool errors and template rewrites are counted over every episode, dropped too."""

from __future__ import annotations

import json

import msgspec

from rlvr.cli.commands.report import format_report, summarize
from rlvr.learner.watch.tally import RunTally
from rlvr.protocol.samples import Episode, Turn
from tests.factories import make_scored


def _episode(sc, end: str, tool_errors: dict | None = None, rewrites: int = 0):
    e = Episode("quiz", [Turn(0, 2, 0)], end, tool_errors=tool_errors or {}, template_rewrites=rewrites)  # type: ignore[arg-type]
    return msgspec.structs.replace(sc, sample=msgspec.structs.replace(sc.sample, episode=e))


def test_the_pass_rate_is_the_run_s_over_every_real_verdict():
    tally = RunTally()
    tally.group([make_scored(k=0, i=i, reward=0.0, outcome="wrong") for i in range(4)])  # dropped: zero variance
    tally.group([make_scored(k=1, i=i, reward=float(i % 2), outcome="ok" if i % 2 else "wrong") for i in range(4)])
    tally.group([make_scored(k=2, i=i, reward=0.0, outcome="timeout") for i in range(4)])  # no evidence: left out
    tally.group([make_scored(k=3, i=i, reward=1.0) for i in range(4)])  # the last group: all right
    assert tally.pass_rate() == {"exact": 6 / 12}
    assert tally.flat() == {"run_pass_rate_exact": 0.5} and tally.summary() == {"pass_rate": {"exact": 0.5}}


def test_every_episode_s_end_reason_tool_errors_and_rewrites_are_counted():
    tally = RunTally()
    tally.group([_episode(make_scored(i=0), "done", {"calculator": 2}, rewrites=1),
                 _episode(make_scored(i=1, reward=0.0, outcome="error"), "prompt_cap"),
                 _episode(make_scored(i=2, reward=0.0, outcome="error"), "template_rewrite", {"unparsed": 1}, 1),
                 _episode(make_scored(i=3, reward=0.0, outcome="error"), "env_timeout")])
    flat = tally.flat()
    assert {k: v for k, v in flat.items() if k.startswith("run_episode_end_")} == {
        "run_episode_end_done": 1.0, "run_episode_end_env_timeout": 1.0, "run_episode_end_prompt_cap": 1.0,
        "run_episode_end_template_rewrite": 1.0}
    assert flat["run_tool_errors_calculator"] == 2.0 and flat["run_tool_errors_unparsed"] == 1.0
    assert flat["run_template_rewrites"] == 2.0 and flat["run_pass_rate_exact"] == 1.0  # only "done" was judged
    s = tally.summary()
    assert s["episode_ends"] == {"done": 1, "prompt_cap": 1, "template_rewrite": 1, "env_timeout": 1}
    assert s["tool_errors"] == {"calculator": 2, "unparsed": 1} and s["template_rewrites"] == 2


def _write(run_dir, records):
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_summary_table_shows_the_run_s_pass_rate_episode_ends_and_alarm_durations(tmp_path):
    _write(tmp_path, [
        {"step": 1, "reward_mean": 0.0, "pass_rate_exact": 0.0, "run_pass_rate_exact": 0.0},
        {"step": 2, "reward_mean": 1.0, "pass_rate_exact": 1.0, "run_pass_rate_exact": 0.25,
         "run_episode_end_done": 30.0, "run_episode_end_prompt_cap": 2.0, "run_tool_errors_calculator": 3.0},
    ])
    s = summarize(tmp_path)
    assert s["pass_rate"] == {"exact": 0.25}  # the run's, not the last step's 100%
    assert s["episode_ends"] == {"done": 30, "prompt_cap": 2} and s["tool_errors"] == {"calculator": 3}
    table = format_report({**s, "alarm_counts": {"flat_reward": 2}, "alarm_seconds": {"flat_reward": 310.4}})
    assert "exact=25.0%" in table and "done=30, prompt_cap=2" in table and "calculator=3" in table
    assert "flat_reward=2 (held 310 s)" in table
    # The learner's own end-of-run totals (learner_summary.json, copied by `up`) win.
    (tmp_path / "summary.json").write_text(json.dumps({"pass_rate": {"exact": 0.3}, "episode_ends": {"done": 40}}))
    s = summarize(tmp_path)
    assert s["pass_rate"] == {"exact": 0.3} and s["episode_ends"] == {"done": 40}


def test_a_run_from_before_the_totals_still_shows_the_last_step_s_rate(tmp_path):
    _write(tmp_path, [{"step": 1, "pass_rate_exact": 0.5}])
    assert summarize(tmp_path)["pass_rate"] == {"exact": 0.5} and "episode_ends" not in summarize(tmp_path)
