"""On real model answers, the project's reasoning-gym reward equals the task's own score_answer.

tests/data/real_answers/reasoning_gym.jsonl holds 200 completions per task
(chain_sum, leg_counting) that SmolLM2-135M-Instruct wrote for prompts the
project's ``reasoning_gym`` dataset kind made (bench/real_answers.py). Each is
scored two ways: by the ``reasoning_gym`` verifier, through the verifier
pool's worker processes (the params crossed msgpack, the dataset rebuilt in
the worker), and directly by reasoning-gym: a fresh ``create_dataset`` of the
same config and ``score_answer(answer, entry)``, the answer found as each
``answer_format`` says (``extract_answer`` for the tags). SmolLM2 rarely writes
the tags (none of these 400 do), so the whole completion is scored too: there
reasoning-gym's partial credit for an answer inside longer text gives real,
non-zero rewards.
"""

from __future__ import annotations

import json
from collections import Counter

import anyio
import pytest

from rlvr.protocol import VerifierSpec
from rlvr.verify.pool import VerifierPool
from tests.conftest import REPO

ANSWERS = REPO / "tests" / "data" / "real_answers" / "reasoning_gym.jsonl"


@pytest.fixture(scope="module")
def answers() -> list[dict]:
    return [json.loads(line) for line in ANSWERS.read_text().splitlines() if line.strip()]


def _found(completion: str, answer_format: str) -> str | None:
    from reasoning_gym.utils import extract_answer

    from rlvr.verify.math.extract import extract_boxed

    if answer_format == "answer_tag":
        return extract_answer(completion)
    if answer_format == "boxed":
        found = extract_boxed(completion)
        return None if found is None else found.strip()
    return completion.strip()


@pytest.mark.parametrize("answer_format", ["answer_tag", "boxed", "whole"])
def test_the_reward_equals_score_answer_on_200_real_answers_per_task(answers, answer_format):
    import reasoning_gym

    assert Counter(a["task"] for a in answers) == {"chain_sum": 200, "leg_counting": 200}

    async def main():
        async with VerifierPool(2, timeout_s=30.0, warm=("reasoning_gym",)) as pool:
            return [await pool.verify(VerifierSpec("reasoning_gym", {**a["params"], "answer_format": answer_format}),
                                      a["completion"]) for a in answers]

    verdicts = anyio.run(main)
    datasets = {}
    for a, v in zip(answers, verdicts, strict=True):
        p = a["params"]
        key = (p["task"], json.dumps(p["config"], sort_keys=True))
        ds = datasets.setdefault(key, reasoning_gym.create_dataset(p["task"], **p["config"]))
        entry = ds[p["entry"]["metadata"]["source_index"]]  # the entry regenerated, as reasoning-gym has it
        assert entry["question"] == p["entry"]["question"]
        expected = ds.score_answer(_found(a["completion"], answer_format), entry)
        assert v.reward == pytest.approx(expected, abs=1e-12), (a["completion"][:200], v)
        assert v.outcome in ("ok", "wrong", "parse_error")
    if answer_format == "whole":  # partial credit: real, non-zero rewards to compare
        assert sum(v.reward > 0 for v in verdicts) >= 10
