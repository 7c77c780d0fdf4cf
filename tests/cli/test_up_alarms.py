"""A run whose reward carries no signal says so early, and its summary accounts for what it dropped.

The walking skeleton under `up`, with a verifier that never finds its
answer (``exact`` reading after a marker the trivial engine never writes):
every verdict is ``parse_error``, every group flat, no step ever comes.
The alarm must reach the plain display within 60 s of the learner's start,
name the verifier with its outcome counts and quote completions; `status`
must print it; and after Ctrl-C the summary must count the dropped samples.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import msgspec
import pytest

from rlvr.cli.run_config import load_config
from tests.conftest import REPO, wait_for, write_config

pytestmark = pytest.mark.slow
SKELETON = REPO / "tests" / "data" / "skeleton.toml"


def test_a_verifier_that_always_fails_to_parse_warns_within_a_minute_and_the_summary_counts_the_drops(tmp_path):
    raw = msgspec.to_builtins(load_config(SKELETON))
    raw["learn"]["steps"] = 1_000_000
    raw["learn"]["eval"]["prompts"] = 0
    raw["learn"]["dataset"]["verifier"] = {"name": "exact", "params": {"gold": "{gold}", "after": "ANSWER:"}}
    raw["learn"]["progress_every_s"] = 2.0
    config = write_config(tmp_path / "flat.json", raw)
    run_dir, out = tmp_path / "run", tmp_path / "up.out"
    with open(out, "w") as f:
        up = subprocess.Popen(
            [sys.executable, "-m", "rlvr.cli", "up", "--config", str(config), "--run-dir", str(run_dir),
             "--display", "plain"],
            stdout=f, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True,
        )
    try:
        wait_for(lambda: "started learn-0" in out.read_text(), timeout_s=60, what="the roles to start")
        started = time.monotonic()
        wait_for(lambda: "[alarm] flat reward" in out.read_text(), timeout_s=60, what="the flat-reward alarm")
        assert time.monotonic() - started < 60
        text = out.read_text()
        assert "verifier 'exact' outcomes: parse_error" in text
        assert "[alarm] verifier 'exact' fails on" in text  # the second alarm: it never parses
        assert "parse_error reward 0.0:" in text  # a completion it saw, quoted with its verdict
        # The plain display keeps talking while no step comes: what was scored, and why it was dropped.
        wait_for(lambda: "[waiting] no step for" in out.read_text(), timeout_s=30, what="a progress line")
        assert "zero_variance=" in out.read_text().split("[waiting] no step for", 1)[1]
        url = next(line.split("nats-server on ")[1].split()[0] for line in text.splitlines() if "nats-server on " in line)
        status = subprocess.run([sys.executable, "-m", "rlvr.cli", "status", "--nats", url, "--run", "skeleton",
                                 "--wait", "2.5"], capture_output=True, text=True, timeout=60)
        assert "ALARM: flat reward" in status.stdout, status.stdout
    finally:
        os.killpg(up.pid, signal.SIGINT)
        code = up.wait(timeout=60)
    assert code == 0, out.read_text()[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    samples, drops = summary["samples"], summary["drops"]
    assert summary["steps"] == 0 and samples["trained"] == 0
    assert samples["dropped"] > 0 and samples["scored"] == samples["dropped"] + samples["in_flight"]
    assert drops["zero_variance"] > 0 and summary["verifier_outcomes"]["parse_error"] > 0
    assert any("flat reward" in a for a in summary["alarms"])
    shown = out.read_text().split("summary", 1)[1]
    assert "samples scored" in shown and f"dropped {samples['dropped']}" in shown and "zero_variance=" in shown
