"""hf and vllm engines: groups, behaviour log-probs against transformers, weight reloads.

Every log-prob an engine returns is compared with a transformers forward pass
on the same weights (float32, max abs difference <= 0.01), at temperature 1
and 0.7. The engines are session-wide, so each test first loads the weights
it expects.
"""

from __future__ import annotations

import pytest

from rlvr.protocol import ChatMessage, SamplingParams
from rlvr.rollout.engines import PromptTooLongError, WeightsRejectedError
from rlvr.rollout.weights import verify_weight_files

TOL = 0.01
PROMPT = "Solve: 12+7="


def _load(loop, engine, weights, versions) -> int:
    v = next(versions)
    loop.run(engine.load_weights(weights, v))
    assert engine.weights_version == v
    return v


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_group_logprobs_match_transformers(loop, engine, weight_dirs, versions, reference, temperature):
    v = _load(loop, engine, weight_dirs["base"], versions)
    sampling = SamplingParams(temperature=temperature, max_tokens=12, seed=3)
    result = loop.run(engine.generate(PROMPT, 4, sampling))
    assert len(result.generations) == 4
    assert result.weights_version_min == result.weights_version_max == v
    for g in result.generations:
        assert len(g.ids) == len(g.logprobs) > 0
        assert g.finish_reason in ("stop", "length")
        assert all(lp <= 0.0 for lp in g.logprobs)
    assert len({tuple(g.ids) for g in result.generations}) > 1, "a group of identical samples"
    diff = reference.max_diff(weight_dirs["base"], result, temperature)
    print(f"max |logprob diff| base T={temperature}: {diff:.2e}")
    assert diff <= TOL


def test_logprobs_are_processed_by_top_k(loop, engine, weight_dirs, versions, reference):
    """With top-k the log-probs are renormalised over the kept tokens: they
    are higher than the plain softmax ones and match a top-k reference."""
    import torch

    _load(loop, engine, weight_dirs["base"], versions)
    result = loop.run(engine.generate(PROMPT, 2, SamplingParams(temperature=0.7, top_k=5, max_tokens=8, seed=4)))
    for g in result.generations:
        plain = reference.logprobs(weight_dirs["base"], result.prompt_ids, g.ids, 0.7)
        x = torch.tensor([result.prompt_ids + g.ids])
        with torch.no_grad():
            logits = reference.model(x).logits[0, len(result.prompt_ids) - 1 : -1].float() / 0.7
        kth = logits.topk(5, dim=-1).values[:, -1:]
        lp = torch.log_softmax(logits.masked_fill(logits < kth, float("-inf")), dim=-1)
        ref = lp.gather(-1, torch.tensor(g.ids).unsqueeze(-1)).squeeze(-1).tolist()
        assert max(abs(a - b) for a, b in zip(g.logprobs, ref, strict=True)) <= TOL
        assert all(a > b for a, b in zip(g.logprobs, plain, strict=True))


def test_reload_follows_new_weights(loop, engine, weight_dirs, versions, reference):
    v = _load(loop, engine, weight_dirs["perturbed"], versions)
    result = loop.run(engine.generate(PROMPT, 4, SamplingParams(temperature=0.7, max_tokens=12, seed=3)))
    assert result.weights_version_min == result.weights_version_max == v
    new = reference.max_diff(weight_dirs["perturbed"], result, 0.7)
    old = reference.max_diff(weight_dirs["base"], result, 0.7)
    print(f"max |logprob diff| perturbed: {new:.2e} (vs old weights {old:.2f})")
    assert new <= TOL
    assert old > 0.1, "the reload did not change the model"


def test_reload_of_tied_embedding_reaches_lm_head(loop, engine, weight_dirs, versions, reference):
    """Only the (tied) embedding and lm_head change: the output head must follow."""
    _load(loop, engine, weight_dirs["base"], versions)
    _load(loop, engine, weight_dirs["head"], versions)
    result = loop.run(engine.generate(PROMPT, 4, SamplingParams(temperature=1.0, max_tokens=12, seed=5)))
    new = reference.max_diff(weight_dirs["head"], result, 1.0)
    old = reference.max_diff(weight_dirs["base"], result, 1.0)
    print(f"max |logprob diff| head-only reload: {new:.2e} (vs old weights {old:.2f})")
    assert new <= TOL
    assert old > 0.1


def test_blob_without_lm_head_is_rejected_for_tied_model(loop, engine, weight_dirs, versions, reference):
    v = _load(loop, engine, weight_dirs["base"], versions)
    with pytest.raises(WeightsRejectedError, match="lm_head.weight"):
        loop.run(engine.load_weights(weight_dirs["no_head"], v + 100))
    assert engine.weights_version == v
    result = loop.run(engine.generate(PROMPT, 2, SamplingParams(max_tokens=8, seed=6)))
    assert reference.max_diff(weight_dirs["base"], result, 1.0) <= TOL


def test_corrupt_blob_is_rejected_and_old_weights_serve(loop, engine, weight_dirs, versions, reference):
    from rlvr.protocol import WeightFile

    v = _load(loop, engine, weight_dirs["perturbed"], versions)
    with pytest.raises(WeightsRejectedError, match="truncated"):
        loop.run(engine.load_weights(weight_dirs["truncated"], v + 100))
    # A blob whose bytes differ from the announcement: sha256 check fails first.
    size = (weight_dirs["base"] / "model.safetensors").stat().st_size
    wrong = [WeightFile(name="model.safetensors", sha256="0" * 64, bytes=size)]
    with pytest.raises(WeightsRejectedError, match="sha256"):
        loop.run(engine.load_weights(weight_dirs["base"], v + 101, wrong))
    with pytest.raises(WeightsRejectedError):
        verify_weight_files(weight_dirs["base"], wrong)
    assert engine.weights_version == v
    result = loop.run(engine.generate(PROMPT, 2, SamplingParams(max_tokens=8, seed=7)))
    assert result.weights_version_max == v
    assert reference.max_diff(weight_dirs["perturbed"], result, 1.0) <= TOL


def test_prompt_too_long_is_rejected(loop, engine):
    with pytest.raises(PromptTooLongError, match=r"\d+ tokens > limit 64"):
        loop.run(engine.generate("1+1= " * 200, 2, SamplingParams(max_tokens=4)))


def test_chat_prompt_goes_through_chat_template(loop, engine):
    tok = engine._tok
    messages = [ChatMessage("system", "Be brief."), ChatMessage("user", "3*4=")]
    result = loop.run(engine.generate(messages, 1, SamplingParams(max_tokens=4, seed=1)))
    text = tok.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in messages], add_generation_prompt=True, tokenize=False
    )
    assert text.endswith("<|im_start|>assistant\n")
    assert result.prompt_ids == tok(text, add_special_tokens=False)["input_ids"]


def test_stop_string_cuts_the_completion(loop, engine, weight_dirs, versions):
    """Same seed with and without a stop string: the stopped text is a prefix
    that ends right before the stop string, and its ids end on the token that
    completed it."""
    _load(loop, engine, weight_dirs["base"], versions)
    sampling = SamplingParams(temperature=1.0, max_tokens=24, seed=11)
    free = loop.run(engine.generate(PROMPT, 1, sampling)).generations[0]
    stop = free.text[len(free.text) // 2 :][:2]
    assert stop.strip(), f"completion too short for a stop string: {free.text!r}"
    cut = loop.run(engine.generate(PROMPT, 1, SamplingParams(temperature=1.0, max_tokens=24, seed=11, stop=(stop,))))
    g = cut.generations[0]
    assert g.finish_reason == "stop"
    assert g.text == free.text[: free.text.find(stop)]
    assert g.ids == free.ids[: len(g.ids)]
    assert stop in engine._tok.decode(g.ids) and stop not in engine._tok.decode(g.ids[:-1])
