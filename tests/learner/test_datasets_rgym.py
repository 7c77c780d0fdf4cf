"""reasoning-gym's procedural tasks as a dataset: a seeded, weighted mix, curriculum levels, a held-out
split that never reaches training, and the task's own score_answer as the verifier."""

from __future__ import annotations

from collections import Counter

import pytest

from rlvr.learner.data.dataset_config import ReasoningGymDataset, ReasoningGymTask
from rlvr.learner.data.datasets import DatasetError, load_splits
from rlvr.verify.registry import resolve

MIX = ReasoningGymDataset(
    tasks=[ReasoningGymTask("chain_sum", weight=3.0, config={"max_terms": 3}),
           ReasoningGymTask("leg_counting", weight=1.0, levels=[0, 2])],
    size=400, holdout=40,
)


def test_the_mix_follows_its_weights_and_levels_and_is_a_function_of_the_seed():
    a, b = load_splits(MIX, seed=1), load_splits(MIX, seed=1)
    assert [s.verifier.params["entry"] for s in a.train] == [s.verifier.params["entry"] for s in b.train]
    counts = Counter(s.dataset for s in a.train)
    assert 2.3 < counts["reasoning_gym/chain_sum"] / counts["reasoning_gym/leg_counting"] < 4.0
    assert {s.level for s in a.train if s.dataset.endswith("leg_counting")} == {0, 2}
    assert {s.level for s in a.train if s.dataset.endswith("chain_sum")} == {None}
    other = load_splits(MIX, seed=2)
    assert [s.verifier.params["entry"] for s in other.train[:20]] != [s.verifier.params["entry"] for s in a.train[:20]]


def test_held_out_questions_never_appear_in_training():
    splits = load_splits(MIX, seed=0)
    held = {s.verifier.params["entry"]["question"] for s in splits.heldout}
    assert len(splits.heldout) == 40 and held
    assert not held & {s.verifier.params["entry"]["question"] for s in splits.train}


def test_prompts_are_chat_with_an_instruction_for_the_answer_format_and_the_config_travels():
    spec = load_splits(MIX, seed=0).train[0]
    assert [m.role for m in spec.prompt] == ["system", "user"] and "<answer>" in spec.prompt[0].content
    params = spec.verifier.params
    assert spec.verifier.name == "reasoning_gym" and params["answer_format"] == "answer_tag"
    assert params["config"]["seed"] is not None and params["entry"]["question"] == spec.prompt[1].content


def test_the_verifier_is_the_task_s_own_score_answer():
    import reasoning_gym

    for spec in load_splits(MIX, seed=0).train[:30]:
        p = spec.verifier.params
        ds = reasoning_gym.create_dataset(p["task"], **p["config"])
        bound = resolve(spec.verifier)
        for completion in (f"<answer>{p['entry']['answer']}</answer>", "<answer>7</answer>", "no tags"):
            expected = ds.score_answer(reasoning_gym.utils.extract_answer(completion), p["entry"])
            assert bound(completion).reward == pytest.approx(expected)
    right = bound(f"I think <answer>{p['entry']['answer']}</answer>")
    assert (right.outcome, right.reward, right.extracted) == ("ok", 1.0, p["entry"]["answer"])
    assert bound("no tags").outcome == "parse_error"


def test_a_bad_task_or_config_is_an_error_naming_it():
    with pytest.raises(DatasetError, match="'no_such_task'"):
        load_splits(ReasoningGymDataset(tasks=[ReasoningGymTask("no_such_task")], size=4, holdout=0), seed=0)
    with pytest.raises(DatasetError, match="chain_sum"):
        load_splits(ReasoningGymDataset(tasks=[ReasoningGymTask("chain_sum", config={"bogus": 1})], size=4,
                                        holdout=0), seed=0)
