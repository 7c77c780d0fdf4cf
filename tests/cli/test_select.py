"""`rlvr-actor select` (one-shot RLVR): on a hand-made accuracy history whose top-variance prompt is known."""

from __future__ import annotations

import json

import pytest

from rlvr.cli.commands.select import Args, SelectionEmptyError, run, select
from rlvr.learner.data.history import SelectionError, read_history, read_selection, subset, variance_ranking


def _history(tmp_path, rows):
    (tmp_path / "prompt_history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def _rows(accs: dict[int, list[float]]) -> list[dict]:
    return [{"i": i, "s": s, "a": a, "r": a} for i, seq in accs.items() for s, a in enumerate(seq)]


def test_the_prompt_whose_accuracy_varies_most_is_selected_first(tmp_path):
    # Prompt 7 goes 0 -> 1 (variance 0.25 over four draws 0, 0, 1, 1); 3 stays at 1 (solved: 0); 5 wobbles.
    run_dir = _history(tmp_path, _rows({3: [1, 1, 1, 1], 5: [0.5, 0.25, 0.5, 0.25], 7: [0, 0, 1, 1], 9: [0.0]}))
    out = select(run_dir, "variance", 2)
    assert out["indices"] == [7, 5] and out["variance"][0] == pytest.approx(0.25)
    assert out["ranked_prompts"] == 3  # prompt 9 was drawn once: not ranked
    assert out["history"][0] == [0, 0, 1, 1]


def test_a_random_selection_draws_from_the_same_prompts_and_is_seeded(tmp_path):
    run_dir = _history(tmp_path, _rows({i: [0.0, 1.0 if i % 2 else 0.5] for i in range(20)}))
    a, b = select(run_dir, "random", 4, seed=1), select(run_dir, "random", 4, seed=1)
    assert a["indices"] == b["indices"] and len(set(a["indices"])) == 4
    assert select(run_dir, "random", 4, seed=2)["indices"] != a["indices"]


def test_one_line_per_step_and_a_torn_last_line_are_read_safely(tmp_path):
    rows = _rows({1: [0.0, 1.0]}) + [{"i": 1, "s": 0, "a": 0.9, "r": 0.9}]  # a replayed group of step 0
    (tmp_path / "prompt_history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"i": 1, "s"')
    assert read_history(tmp_path) == {1: [0.0, 1.0]}
    assert variance_ranking({1: [0.0, 1.0], 2: [0.3, 0.3]}) == [(1, 0.25), (2, 0.0)]


def test_the_command_writes_a_selection_that_train_subset_reads(tmp_path):
    run_dir = _history(tmp_path, _rows({3: [0, 1], 4: [1, 1]}))
    out = tmp_path / "one.json"
    assert run(Args(from_=str(run_dir), by="variance", k=1, output=str(out))) == 0
    assert read_selection(str(out)) == [3]

    class Spec:
        def __init__(self, index): self.index = index

    assert [s.index for s in subset([Spec(4), Spec(3)], [3])] == [3]
    with pytest.raises(SelectionError, match="not in the training split"):
        subset([Spec(4)], [3])


def test_nothing_to_rank_is_an_error_not_an_empty_file(tmp_path):
    with pytest.raises(SelectionEmptyError):
        select(_history(tmp_path, _rows({1: [0.0]})), "variance", 1)
    assert run(Args(from_=str(tmp_path / "nope"), output=str(tmp_path / "x.json"))) == 2
