"""``rlvr-actor eval``: pass@k of a checkpoint, offline through an engine and the verifier pool."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import anyio
import pytest

from rlvr.cli.commands.eval import (
    CheckpointNotFoundError,
    EvalArgumentsInvalidError,
    Args,
    add_arguments,
    eval_report,
    parse_ks,
    resolve_checkpoint,
    run,
    score_prompts,
)
from rlvr.cli.args import parse_into

REPORT_KEYS = {"model", "data", "engine", "n", "ks", "temperature", "max_tokens", "seed", "prompts",
               "samples", "pass_at_k", "outcomes", "mean_reward", "per_prompt", "seconds"}


def _args(*argv: str) -> Args:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parse_into(parser, list(argv), Args)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from rlvr.learner.example.arith_model import build_arith_model

    return build_arith_model(tmp_path_factory.mktemp("eval") / "model", hidden=32, layers=1, heads=1)


def test_report_turns_known_correct_counts_into_unbiased_pass_at_k():
    outcomes = Counter(ok=3, wrong=2, timeout=1)
    report = eval_report(correct=[0, 1, 2], n=2, ks=[1, 2], outcomes=outcomes, rewards=[1, 1, 1, 0, 0, 0],
                         indices=[7, 3, 5], model="m", data="d")
    # pass@1 = mean(0/2, 1/2, 2/2); pass@2 = mean(0, 1, 1) (one right of two is enough)
    assert report["pass_at_k"] == {"1": pytest.approx(0.5), "2": pytest.approx(2 / 3)}
    # The timeout is incorrect for pass@k but counted on its own; every outcome is listed.
    assert report["outcomes"] == {"ok": 3, "wrong": 2, "timeout": 1, "sandbox_error": 0, "parse_error": 0, "error": 0}
    assert report["per_prompt"] == [{"index": 7, "correct": 0}, {"index": 3, "correct": 1},
                                    {"index": 5, "correct": 2}]
    assert (report["prompts"], report["samples"], report["mean_reward"]) == (3, 6, 0.5)


def test_k_values_are_parsed_and_n_must_cover_them():
    assert parse_ks("8,1", None) == ([1, 8], 8)
    assert parse_ks("1", 4) == ([1], 4)
    for bad, n in (("1,8", 4), ("0", None), ("a", None), ("", None)):
        with pytest.raises(EvalArgumentsInvalidError):
            parse_ks(bad, n)


def test_checkpoint_is_a_model_folder_or_a_run_directory(tmp_path):
    def model_dir(path: Path, complete: bool = True) -> Path:
        path.mkdir(parents=True)
        (path / "model.safetensors").write_bytes(b"")
        if complete:
            (path / "config.json").write_text("{}")
        return path

    run = tmp_path / "run"
    with pytest.raises(CheckpointNotFoundError):
        resolve_checkpoint(run)
    model_dir(run / "model")
    assert resolve_checkpoint(run) == run / "model"
    model_dir(run / "weights" / "v2")
    model_dir(run / "weights" / "v10")
    model_dir(run / "weights" / "v11", complete=False)  # an export still being written
    assert resolve_checkpoint(run) == run / "weights" / "v10"
    assert resolve_checkpoint(run / "weights" / "v2") == run / "weights" / "v2"


def test_eval_writes_a_report_for_the_arithmetic_heldout_split(tiny_model, tmp_path, capsys):
    out = tmp_path / "report.json"
    args = _args("--checkpoint", str(tiny_model), "--data", "arithmetic", "--engine", "hf",
                 "--limit", "8", "--k", "1,2", "--n", "2", "--pool-size", "1", "--output", str(out))
    assert run(args) == 0
    report = json.loads(out.read_text())
    assert REPORT_KEYS <= set(report)
    assert (report["engine"], report["n"], report["prompts"], report["max_tokens"]) == ("hf", 2, 8, 7)
    assert set(report["pass_at_k"]) == {"1", "2"}
    assert sum(report["outcomes"].values()) == 16  # every completion got a verdict
    assert 0.0 <= report["pass_at_k"]["1"] <= report["pass_at_k"]["2"] <= 1.0
    assert "pass@1" in capsys.readouterr().out


def test_pass_at_1_is_exact_when_the_gold_answers_are_known(tiny_model, tmp_path):
    """Greedy decoding is deterministic: make the gold answer of prompts 0 and 2
    the model's own greedy completion, and of 1 and 3 a string it cannot emit."""
    from rlvr.protocol.tasks import SamplingParams
    from rlvr.rollout.engines.base import HFEngineConfig, make_engine

    prompts = ["12+7=", "3-9=", "45+45=", "80-1="]

    async def greedy() -> list[str]:
        engine = make_engine(HFEngineConfig(model=str(tiny_model)))
        await engine.start()
        try:
            greedy_params = SamplingParams(temperature=0.0, max_tokens=7)
            return [(await engine.generate(p, 1, greedy_params)).generations[0].text for p in prompts]
        finally:
            await engine.close()

    texts = anyio.run(greedy)
    assert all(t.strip() for t in texts)  # a non-empty answer to match
    golds = [texts[0], "not an answer", texts[2], "not an answer"]
    data = tmp_path / "known.jsonl"
    data.write_text("".join(json.dumps({"q": p, "a": g}) + "\n" for p, g in zip(prompts, golds)))
    args = _args("--checkpoint", str(tiny_model), "--data", str(data), "--engine", "hf", "--k", "1",
                 "--temperature", "0", "--max-tokens", "7", "--prompt-field", "q", "--answer-field", "a",
                 "--verifier", "exact", "--pool-size", "1")
    assert run(args) == 0
    report = json.loads((tiny_model / "eval-known.json").read_text())
    assert report["pass_at_k"] == {"1": 0.5}
    assert [p["correct"] for p in report["per_prompt"]] == [1, 0, 1, 0]
    assert report["outcomes"]["ok"] == 2 and report["outcomes"]["wrong"] == 2


def test_a_verification_timeout_counts_as_incorrect_and_is_reported_apart(tiny_model, tmp_path):
    """Even with a timeout reward of 1.0, a timed-out completion is not a correct one."""
    from rlvr.learner.data.datasets import TaskSpec
    from rlvr.cli.commands.eval import score_prompts
    from rlvr.protocol.tasks import SamplingParams, VerifierSpec
    from rlvr.rollout.engines.base import HFEngineConfig, make_engine
    from rlvr.verify.pool import VerifierPool

    always = VerifierSpec("regex", {"pattern": "[\\s\\S]*"})  # every completion is ok
    hangs = VerifierSpec("tests.verifier_fixtures:gate", {"path": str(tmp_path / "never")})
    specs = [TaskSpec("t", 0, "1+1=", always), TaskSpec("t", 1, "2+2=", hangs)]

    async def run():
        engine = make_engine(HFEngineConfig(model=str(tiny_model)))
        await engine.start()
        try:
            async with VerifierPool(2, timeout_s=0.5, timeout_reward=1.0, warm=(), plugins=(hangs.name,)) as pool:
                return await score_prompts(engine, pool, specs, 2, SamplingParams(max_tokens=7, seed=0))
        finally:
            await engine.close()

    correct, outcomes, rewards, kept, cot = anyio.run(run)
    assert correct == [2, 0]
    assert outcomes == Counter(ok=2, timeout=2)
    assert sorted(rewards) == [1.0] * 4 and kept == [] and cot is None  # none asked for; no step verifier


def test_bad_input_exits_2_before_generating(tiny_model, tmp_path):
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")
    ok = ("--checkpoint", str(tiny_model), "--data", str(data), "--engine", "hf", "--max-tokens", "7")
    assert run(_args(*ok, "--checkpoint", str(tmp_path))) == 2  # no model there
    assert run(_args(*ok, "--verifier", "no-such-verifier")) == 2
    assert run(_args(*ok, "--max-tokens", "64")) == 2  # the tiny model's whole context
    assert run(_args(*ok, "--k", "1,8", "--n", "4")) == 2
    assert run(_args(*ok, "--data", str(tmp_path / "missing.jsonl"))) == 2


def test_several_checkpoints_give_pass_at_k_curves_on_the_same_prompts_with_a_plot(tiny_model, tmp_path, capsys):
    out = tmp_path / "curves.json"
    args = _args("--checkpoint", f"base={tiny_model}", "--checkpoint", f"again={tiny_model}", "--data", "arithmetic",
                 "--engine", "hf", "--limit", "6", "--k", "1,2,4,8", "--n", "8", "--pool-size", "1",
                 "--output", str(out))
    assert run(args) == 0
    report = json.loads(out.read_text())
    assert [c["label"] for c in report["checkpoints"]] == ["base", "again"]
    base, again = report["checkpoints"]
    # The same weights, prompts and seeds: the same curve, so no crossing, and coverage is pass@8.
    assert base["pass_at_k"] == again["pass_at_k"] and report["crossing_k"] is None
    assert base["coverage"] == base["pass_at_k"]["8"]
    assert Path(report["plot"]).stat().st_size > 1000
    assert "curves do not cross" in capsys.readouterr().out


def test_the_crossing_is_where_the_trained_curve_s_lead_turns_over():
    from rlvr.cli.commands.eval import crossing

    ks = [1, 2, 4, 8, 16]
    base = {"1": 0.2, "2": 0.35, "4": 0.5, "8": 0.7, "16": 0.85}
    rl = {"1": 0.5, "2": 0.6, "4": 0.62, "8": 0.66, "16": 0.7}  # better at pass@1, a lower ceiling
    assert crossing(ks, base, rl) == 8
    assert crossing(ks, base, {k: v + 0.05 for k, v in base.items()}) is None


def test_cot_pass_at_k_counts_a_sample_only_when_its_answer_and_every_step_are_right(tiny_model):
    import anyio

    from rlvr.learner.data.datasets import TaskSpec
    from rlvr.protocol import VerifierSpec
    from rlvr.protocol.tasks import SamplingParams
    from rlvr.rollout.engines.base import GroupResult, Generation
    from rlvr.verify.pool import VerifierPool

    class Fixed:  # an engine that answers what the test needs: this test is about counting
        async def generate(self, prompt, n, sampling):
            texts = ["1+1=2 2+2=4", "1+1=3 3+1=4", "1+1=2 2+2=5"]  # right; right answer, wrong step; wrong
            return GroupResult([1], [Generation([1], [-0.1], t, "stop") for t in texts], 0, 0)

    spec = TaskSpec("d", 0, "q", VerifierSpec("arith_steps", {"gold": "4"}))

    async def go():
        async with VerifierPool(1, timeout_s=10, warm=()) as pool:
            return await score_prompts(Fixed(), pool, [spec], 3, SamplingParams(max_tokens=8))

    correct, _, _, _, cot = anyio.run(go)
    assert correct == [2] and cot == [1]
