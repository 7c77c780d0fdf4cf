"""From scored samples to per-token advantages (learner/train/steps.py): steps placed on the right tokens."""

from __future__ import annotations

from collections import Counter

import msgspec
import pytest

from rlvr.learner.algos.config import AdvantageConfig
from rlvr.learner.algos.process import process_advantages
from rlvr.learner.train.steps import StepAligner, group_token_advantages
from rlvr.protocol import Completion, Episode, Scored, Turn, VerifierSpec
from rlvr.verify.registry import resolve
from tests.factories import make_sample
from tests.rollout.chat_tokenizers import chat_tokenizer

TOK = chat_tokenizer("qwen2.5")  # a byte-level BPE: tokens span several characters
ALIGNER = StepAligner(lambda ids: TOK.decode(ids, skip_special_tokens=True))


def _scored(text: str, gold: str, k: int = 0, i: int = 0, n: int = 2) -> Scored:
    ids = TOK(text)["input_ids"] + [TOK.eos_token_id]
    sample = msgspec.structs.replace(make_sample(k=k, i=i, n=n, text=text),
                                     completion=Completion(ids=ids, logprobs=[-1.0] * len(ids)))
    verdict = resolve(VerifierSpec("arith_steps", {"gold": gold, "split": "lines"}))(text)
    return Scored(sample=sample, verdict=verdict)


def test_each_step_ends_on_the_token_holding_its_last_character():
    text = "What is 2+3 = 5\nThe answer is 5+5 = 11\nsure"
    sc = _scored(text, "10")
    ends = ALIGNER.token_ends(sc.sample.completion.ids, text, [s.end for s in sc.verdict.steps])
    assert ends is not None and len(ends) == 3  # two lines of claims, then the answer step at the end
    for end, step in zip(ends, sc.verdict.steps):
        covered = TOK.decode(sc.sample.completion.ids[: end + 1], skip_special_tokens=True)
        before = TOK.decode(sc.sample.completion.ids[:end], skip_special_tokens=True)
        assert len(covered) >= step.end > len(before)  # token `end` holds the step's last character


def test_a_text_its_ids_do_not_decode_to_is_not_placed():
    sc = _scored("1+1=2\n", "2")
    assert ALIGNER.token_ends(sc.sample.completion.ids, "1+1=3\n", [5]) is None


def test_a_group_s_token_advantages_follow_the_papers_formula_on_the_placed_steps():
    group = [_scored("1+1=2\n2+2=5\n", "5", i=0), _scored("1+1=2\n2+2=4\n", "4", i=1)]
    counts: Counter = Counter()
    cfg = AdvantageConfig(process="steps")
    outcome, token_adv = group_token_advantages(group, cfg, ALIGNER, counts)
    ends = [ALIGNER.token_ends(sc.sample.completion.ids, sc.sample.text, [s.end for s in sc.verdict.steps])
            for sc in group]
    want = process_advantages([[1.0, 0.0], [1.0, 1.0]], ends, [len(sc.sample.completion.ids) for sc in group])
    assert token_adv == want and counts["process_steps"] == 4
    assert outcome == [0.0, 0.0]  # both final answers are "right" by their own gold: no outcome signal
    mixed = group_token_advantages(group, AdvantageConfig(process="steps", outcome_weight=0.5), ALIGNER, Counter())[1]
    assert mixed == want  # + 0.5 x 0


def test_without_steps_a_group_trains_on_its_outcome_and_says_so():
    plain = [Scored(sample=make_sample(i=i), verdict=resolve(VerifierSpec("exact", {"gold": "5"}))(t))
             for i, t in enumerate(["5", "4"])]
    counts: Counter = Counter()
    outcome, token_adv = group_token_advantages(plain, AdvantageConfig(process="steps"), ALIGNER, counts)
    assert token_adv is None and counts["process_groups_without_steps"] == 1
    assert outcome[0] > 0 > outcome[1]


def test_per_turn_rewards_of_an_episode_end_on_the_last_token_of_each_turn():
    def episode(i: int, turn_rewards: list[float]) -> Scored:
        s = make_sample(i=i, n=2)
        ids = list(range(10, 20))
        mask = [1, 1, 1, 0, 0, 1, 1, 1, 1, 0]
        s = msgspec.structs.replace(
            s, completion=Completion(ids=ids, logprobs=[-1.0 if m else 0.0 for m in mask], mask=mask),
            episode=Episode(environment="e", turns=[Turn(0, 3, 0), Turn(5, 9, 0)], end_reason="done",
                            turn_rewards=turn_rewards, env_reward=sum(turn_rewards)))
        return Scored(sample=s, verdict=resolve(VerifierSpec("exact", {"gold": "5"}))("5"))

    group = [episode(0, [1.0, 0.0]), episode(1, [0.0, 1.0])]
    _, token_adv = group_token_advantages(group, AdvantageConfig(process="turns"), None, Counter())
    assert token_adv == process_advantages([[1.0, 0.0], [0.0, 1.0]], [[2, 8], [2, 8]], [10, 10])


@pytest.mark.parametrize("text", ["12+34=46+56=102", "héllo wörld 3*3=9 ✓\n"])
def test_placement_survives_multi_byte_characters_and_running_chains(text):
    spec = {"gold": "102", "chain": "running"} if "+" in text else {}
    v = resolve(VerifierSpec("arith_steps", spec))(text)
    ids = TOK(text)["input_ids"]
    ends = ALIGNER.token_ends(ids, text, [s.end for s in v.steps])
    assert ends is not None and ends == sorted(set(ends)) and ends[-1] < len(ids)


def test_a_completion_that_skips_its_steps_counts_as_the_groups_worst_step_not_as_no_signal():
    group = [_scored("1+1=2\n2+2=4\n", "4", i=0), _scored("4", "4", i=1)]  # the second writes no step at all
    assert group[1].verdict.outcome == "parse_error"
    _, token_adv = group_token_advantages(group, AdvantageConfig(process="steps"), ALIGNER, Counter())
    ends = ALIGNER.token_ends(group[0].sample.completion.ids, group[0].sample.text,
                              [s.end for s in group[0].verdict.steps])
    n1 = len(group[1].sample.completion.ids)
    want = process_advantages([[1.0, 1.0], [0.0]], [ends, [n1 - 1]], [len(group[0].sample.completion.ids), n1])
    assert token_adv == want and max(token_adv[1]) < 0 < token_adv[0][0]  # skipping the steps is penalised
