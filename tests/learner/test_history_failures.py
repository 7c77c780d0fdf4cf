"""prompt_history.jsonl records a failed verification (a timeout, an environment's failure, a cut
episode) as missing, never as accuracy 0.0, and every reader skips it: `select`'s history and
ranking, and the feeder's pass-rate curriculum (the learner hands it the same judged rewards)."""

from __future__ import annotations

import json

import anyio
import msgspec

from rlvr.learner.custody.groups import judged
from rlvr.learner.data.history import PromptHistory, read_history, variance_ranking
from rlvr.protocol import SamplingParams, Verdict
from rlvr.protocol.samples import Episode, Turn
from tests.factories import make_scored


def _scored(k: int, i: int, reward: float, outcome: str = "ok", end: str | None = None):
    sc = make_scored(k=k, i=i, reward=reward, outcome=outcome)
    sc = msgspec.structs.replace(sc, sample=msgspec.structs.replace(sc.sample, index=k))  # prompt k of the dataset
    if end is not None:
        sc = msgspec.structs.replace(sc, sample=msgspec.structs.replace(
            sc.sample, episode=Episode("quiz", [Turn(0, 2, 0)], end)))  # type: ignore[arg-type]
    return sc


def test_failed_verifications_are_missing_not_zero_and_readers_skip_them(tmp_path):
    history = PromptHistory(tmp_path)
    history.record(1, [_scored(7, 0, 1.0), _scored(7, 1, 0.0, "wrong")])  # a real 0.5
    history.record(2, [_scored(7, 0, 0.0, "timeout"), _scored(7, 1, 0.0, "error", end="env_error")])  # nothing real
    history.record(3, [_scored(7, 0, 1.0), _scored(7, 1, 0.0, "timeout"), _scored(7, 2, 0.0, "error", end="prompt_cap"),
                       _scored(7, 3, 0.0, "sandbox_error")])  # one real verdict: 1.0, not 0.25
    history.record(3, [_scored(9, 0, 0.0, "timeout"), _scored(9, 1, 0.0, "timeout")])
    history.close()
    lines = [json.loads(line) for line in (tmp_path / "prompt_history.jsonl").read_text().splitlines()]
    assert [(r["s"], r["a"], r["r"]) for r in lines] == [(1, 0.5, 0.5), (2, None, None), (3, 1.0, 1.0), (3, None, None)]
    assert read_history(tmp_path) == {7: [0.5, 1.0]}  # prompt 9 was never judged: not in the history at all
    assert variance_ranking(read_history(tmp_path)) == [(7, 0.0625)]


def test_the_curriculum_gets_only_judged_rewards():
    from rlvr.learner.data.feeder import Feeder

    async def main():
        feeder = Feeder(None, [object()], group_size=3, sampling=SamplingParams(), max_inflight=1, seed=0,  # type: ignore[arg-type]
                        curriculum="pass_rate")
        members = [_scored(7, 0, 1.0), _scored(7, 1, 0.0, "timeout"), _scored(7, 2, 0.0, "error", end="env_timeout")]
        feeder.done("t-t7", [sc.verdict.reward for sc in members if judged(sc)], 7)  # as the learner calls it
        feeder.done("t-t8", [sc.verdict.reward for sc in members[1:] if judged(sc)], 8)
        return {i: list(rates) for i, rates in feeder.pass_rate.items()}

    assert anyio.run(main) == {7: [1.0]}  # 8 had no real verdict: no entry, not a 0


def test_a_rejected_prompt_is_not_judged():
    sc = _scored(1, 0, 0.0, "parse_error")
    rejected = msgspec.structs.replace(sc, sample=msgspec.structs.replace(sc.sample, finish_reason="rejected"),
                                       verdict=Verdict(0.0, "parse_error", "exact"))
    assert judged(sc) and not judged(rejected)
