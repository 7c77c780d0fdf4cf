"""``rlvr-actor report``: plots and summary.json from a synthetic metrics.jsonl."""

from __future__ import annotations

import json
import random
from pathlib import Path

from rlvr.cli.main import main
from rlvr.cli.commands.report import PLOTS, format_report, read_metrics, summarize, write_plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _step(step: int, rng: random.Random) -> dict:
    return {
        "step": step, "policy_version": step, "samples": 32, "groups": 4, "samples_trained": 32 * step,
        "reward_mean": 0.2 + 0.1 * step + rng.uniform(-0.02, 0.02), "reward_std": 0.3,
        "response_len_mean": 5.0 + rng.random(), "response_len_max": 7.0, "response_clip_ratio": 0.0,
        "staleness_mean": 0.5, "staleness_max": 1.0, "staleness_hist_0": 16.0, "staleness_hist_1": 16.0,
        "entropy": 1.0 - 0.1 * step, "clip_frac": 0.01, "grad_norm": 0.5, "lr": 1e-4,
        "zero_variance_share": 0.3, "drop_zero_variance": 8.0 * step, "drop_stale": 2.0,
        "pass_rate_exact": 0.3, "wait_s": 0.1, "train_s": 0.4, "tokens_per_s": 500.0 + step,
        "outcome_ok": 10.0 * step, "outcome_wrong": 30.0 * step, "outcome_timeout": 1.0, "outcome_sandbox_error": 0.0,
        "outcome_parse_error": 0.0,
    }


def _write_run(run_dir: Path, *, with_kl: bool = False) -> None:
    rng = random.Random(0)
    lines = [{"event": "eval", "label": "before", "step": 0, "pass_at_1": 0.2, "pass_at_4": 0.5, "prompts": 8, "missing": 0}]
    for s in range(1, 5):
        rec = _step(s, rng)
        if with_kl:
            rec["kl"] = 0.01 * s
        lines.append(rec)
    lines.append({"event": "eval", "label": "after", "step": 4, "pass_at_1": 0.45, "pass_at_4": 0.7, "prompts": 8, "missing": 0})
    text = "".join(json.dumps(r) + "\n" for r in lines)
    (run_dir / "metrics.jsonl").write_text(text + '{"step": 5, "rew')  # a torn last line: a run still writing


def test_write_plots_makes_valid_pngs_even_for_unrecorded_metrics(tmp_path):
    _write_run(tmp_path)  # no "kl" key: its plot must say "not recorded", not crash
    paths = write_plots(tmp_path)
    names = {p.name for p in paths}
    assert names == {p.file for p in PLOTS} | {"pass_at_1.png"}
    for p in paths:
        assert p.parent == tmp_path / "plots"
        data = p.read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 2000, p


def test_summarize_sets_keys_and_keeps_existing_ones(tmp_path):
    _write_run(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"engine": "hf", "wall_seconds": 12.5, "steps": 99}))
    s = summarize(tmp_path)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == s
    assert s["engine"] == "hf" and s["wall_seconds"] == 12.5
    assert s["steps"] == 4 and s["samples_trained"] == 128
    assert s["pass_at_1_before"] == 0.2 and s["pass_at_1_after"] == 0.45
    assert s["pass_at_k_after"] == {"1": 0.45, "4": 0.7}
    assert s["drops"] == {"zero_variance": 32, "stale": 2}
    # Every outcome is listed, zeros included: a run without timeouts says so.
    assert s["verifier_outcomes"] == {"ok": 40, "wrong": 120, "timeout": 1, "sandbox_error": 0, "parse_error": 0}
    (tmp_path / "summary.json").write_text(json.dumps({"drops": {"partial": 3, "zero_variance": 40}}))
    assert summarize(tmp_path)["drops"] == {"partial": 3, "zero_variance": 40}  # the learner's final count wins
    assert s["staleness_max"] == 1.0 and s["tokens_per_s_mean"] == 502.5
    table = format_report(s)
    assert "20.0% -> 45.0%  (+25.0 points)" in table and "zero_variance=32" in table
    assert "ok=40, wrong=120, timeout=1, sandbox_error=0, parse_error=0" in table


def test_a_replayed_step_counts_once_with_the_later_record(tmp_path):
    recs = [{"step": 1, "reward_mean": 0.1}, {"step": 2, "reward_mean": 0.2}, {"step": 2, "reward_mean": 0.3}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    m = read_metrics(tmp_path)
    assert [r["reward_mean"] for r in m.steps] == [0.1, 0.3]


def test_report_main_prints_table_and_fails_cleanly_without_metrics(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "metrics.jsonl does not exist" in capsys.readouterr().err
    _write_run(tmp_path, with_kl=True)
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "pass@1 before -> after" in out and "plots (7)" in out
    assert (tmp_path / "plots" / "kl.png").is_file()


def test_time_to_gain_is_the_first_round_at_or_past_the_bar_and_the_report_says_when():
    from rlvr.learner.watch.records import first_gain

    evals = [{"label": "before", "step": 0, "pass_at_1": 0.18, "finished_at": 100.0},
             {"label": "step100", "step": 100, "pass_at_1": 0.37, "finished_at": 150.0},
             {"label": "step200", "step": 200, "pass_at_1": 0.38, "finished_at": 200.0},  # +20.0: the bar
             {"label": "after", "step": 300, "pass_at_1": 0.45, "finished_at": 250.0}]
    gain = first_gain(evals, 0.20)
    assert (gain["label"], gain["step"], gain["gain"], gain["finished_at"]) == ("step200", 200, 0.2, 200.0)
    assert first_gain(evals, 0.25)["label"] == "after" and first_gain(evals, 0.5) is None
    assert first_gain(evals[1:], 0.2) is None  # no "before" round: nothing to gain against
    row = next(line for line in format_report({"time_to_gain": {**gain, "up_seconds": 171.6}}).splitlines()
               if "time to gain" in line)
    assert "+20.0 points" in row and "step200, step 200" in row and "172 s from `up`" in row
    assert "not reached" in format_report({"time_to_gain": None})
