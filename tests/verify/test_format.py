"""format: tags present, in order, once each, non-empty."""

import pytest

from rlvr.protocol.tasks import VerifierSpec
from rlvr.verify.registry import VerifierSpecError, resolve


def verdict(text, **params):
    return resolve(VerifierSpec(name="format", params=params))(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("<think>2+2 is 4</think><answer>4</answer>", ""),
        ("\n<think>\nreason\n</think>\n\n<answer> 4 </answer>\n", ""),
        ("<answer>4</answer><think>late</think>", "text before <think>"),
        ("<think>r</think>", "<answer> appears 0 times, expected 1"),
        ("<think> </think><answer>4</answer>", "<think> is empty"),
        ("<think>r</think><answer>\n</answer>", "<answer> is empty"),
        ("Sure! <think>r</think><answer>4</answer>", "text before <think>"),
        ("<think>r</think> so <answer>4</answer>", "text before <answer>"),
        ("<think>r</think><answer>4</answer> done", "text after </answer>"),
        ("<think>a</think><think>b</think><answer>4</answer>", "<think> appears 2 times, expected 1"),
        ("<think>a<answer>x</think><answer>4</answer>", "<answer> appears 2 times, expected 1"),
    ],
)
def test_format_default_tags(text, reason):
    v = verdict(text)
    assert v.detail.endswith(reason) if reason else v.detail == ""
    assert (v.reward, v.outcome) == ((0.0, "wrong") if reason else (1.0, "ok"))


def test_well_formed_extracts_the_last_tag():
    assert verdict("<think>r</think><answer> 42 </answer>").extracted == "42"


def test_non_strict_allows_text_around_tags():
    assert verdict("Sure! <think>r</think> so <answer>4</answer> done", strict=False).reward == 1.0


def test_non_strict_still_requires_the_order():
    v = verdict("<answer>4</answer><think>late</think>", strict=False)
    assert (v.reward, v.detail) == (0.0, "<answer> out of order")


def test_first_tag_opened_in_the_prompt():
    assert verdict("reasoning</think><answer>4</answer>", first_tag_in_prompt=True).reward == 1.0
    assert verdict("<think>reasoning</think><answer>4</answer>", first_tag_in_prompt=True).reward == 0.0


def test_custom_tags_in_order():
    tags = ["reasoning", "final"]
    assert verdict("<reasoning>x</reasoning><final>y</final>", tags=tags).reward == 1.0
    assert verdict("<final>y</final><reasoning>x</reasoning>", tags=tags).reward == 0.0


def test_duplicate_or_malformed_tags_are_spec_errors():
    with pytest.raises(VerifierSpecError, match="tags must be distinct"):
        verdict("x", tags=["a", "a"])
    with pytest.raises(VerifierSpecError, match=r"at `\$.tags\[0\]`"):
        verdict("x", tags=["<a>"])


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("7 + 12 = 19, so the answer is \\boxed{19}.", ""),
        ("\\boxed{-5}", ""),
        ("\\fbox{3}", ""),
        ("\\boxed{\\frac{1}{2}}", ""),
        ("The answer is 19.", "\\boxed appears 0 times, expected 1"),
        ("\\boxed{}", "\\boxed{} is empty or unclosed"),
        ("\\boxed{ }", "\\boxed{} is empty or unclosed"),
        ("\\boxed{19", "\\boxed{} is empty or unclosed"),
        ("\\boxed{1} or maybe \\boxed{2}", "\\boxed appears 2 times, expected 1"),
    ],
)
def test_format_boxed_style_wants_exactly_one_non_empty_box(text, reason):
    v = verdict(text, style="boxed")
    assert v.detail == reason
    assert (v.reward, v.outcome) == ((0.0, "wrong") if reason else (1.0, "ok"))


def test_format_boxed_style_extracts_the_box_and_ignores_the_tags():
    assert verdict("so \\boxed{ 19 }", style="boxed", tags=["answer"]).extracted == "19"


def test_format_unknown_style_is_an_error_naming_the_key():
    with pytest.raises(VerifierSpecError, match="style"):
        verdict("x", style="latex")


def test_format_boxed_style_on_real_model_answers():
    # 228 answers SmolLM2-135M-Instruct wrote (tests/verify/data/math_smollm2.jsonl). The
    # model parrots the prompt's "\\boxed{}" ("The answer is within \\boxed{}.") with nothing
    # in it: none of those may earn the format reward, and a rewarded answer's box is the
    # one the math verifier reads.
    import json
    from pathlib import Path

    from rlvr.verify.math.extract import extract_boxed

    rows = [json.loads(line) for line in (Path(__file__).parent / "data" / "math_smollm2.jsonl").open()]
    echoes = 0
    for r in rows:
        v = verdict(r["response"], style="boxed")
        assert v.reward in (0.0, 1.0)
        box = extract_boxed(r["response"])
        if "\\boxed" in r["response"] and not (box or "").strip():
            echoes += 1
            assert v.reward == 0.0, r["id"]
        if v.reward:
            assert v.extracted == box.strip(), r["id"]
    assert echoes >= 5


def test_format_boxed_style_survives_hostile_completions():
    # Unclosed, deeply nested and huge boxes: a verdict, never an exception or a hang.
    for text in ["\\boxed{" * 10_000, "\\boxed{" + "{" * 50_000 + "}" * 50_000 + "}", "\\boxed" * 100_000,
                 "x" * 1_000_000 + "\\boxed{1}"]:
        v = verdict(text, style="boxed")
        assert v.reward in (0.0, 1.0)
