"""Chunked log-probs and entropy against the full-logits computation they replace."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from rlvr.learner.train.token_logprobs import (
    OutputHeadMissingError,
    full_logits_logprobs,
    head_logprobs,
    output_head,
    token_logprobs,
)

VOCAB = 96


def tiny_model(arch: str, dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    common = dict(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, initializer_range=0.2,
    )
    if arch == "qwen2":  # tied head, as Qwen2.5-0.5B
        model = Qwen2ForCausalLM(Qwen2Config(tie_word_embeddings=True, **common))
    else:  # a separate lm_head
        model = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=False, **common))
    return model.to(dtype)


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Three rows of lengths 11, 6 and 2, right-padded with id 0: [3, 11]."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (3, 11), generator=gen)
    mask = torch.ones_like(ids)
    for row, length in ((1, 6), (2, 2)):
        ids[row, length:] = 0
        mask[row, length:] = 0
    return ids, mask


def run(model, ids, mask, temperature, *, chunked: bool, chunk_tokens: int = 4):
    """logp, entropy and the parameter gradients of a weighted sum of logp."""
    model.zero_grad(set_to_none=True)
    if chunked:
        logp, entropy = token_logprobs(model, ids, mask, temperature, with_entropy=True, chunk_tokens=chunk_tokens)
    else:
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
        logp, entropy = full_logits_logprobs(logits, ids, temperature, with_entropy=True)
    weights = torch.linspace(-1.0, 1.0, logp.numel()).view_as(logp)  # every position, padding too
    (logp * weights).sum().backward()
    grads = {name: p.grad.float().clone() for name, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), entropy, grads


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_matches_full_logits_in_values_and_gradients(arch, dtype, tol, temperature):
    model = tiny_model(arch, dtype)
    ids, mask = padded_batch()
    old_logp, old_entropy, old_grads = run(model, ids, mask, temperature, chunked=False)
    new_logp, new_entropy, new_grads = run(model, ids, mask, temperature, chunked=True)  # 30 positions, 8 chunks
    assert new_logp.shape == new_entropy.shape == (3, 10)
    assert new_logp.dtype == new_entropy.dtype == torch.float32
    torch.testing.assert_close(new_logp, old_logp, atol=tol, rtol=tol)
    torch.testing.assert_close(new_entropy, old_entropy, atol=tol, rtol=tol)
    assert new_grads.keys() == old_grads.keys() and old_grads
    for name, old in old_grads.items():
        # Relative to the tensor's largest gradient: in bf16 the head's
        # gradient is summed over chunks in bf16, one rounding per chunk.
        err = (new_grads[name] - old).abs().max() / old.abs().max().clamp_min(1e-12)
        assert err <= tol, f"{name}: relative gradient error {err:.2e} > {tol}"


def test_entropy_only_when_asked_and_without_grad():
    model = tiny_model("qwen2", torch.float32)
    ids, mask = padded_batch()
    logp, entropy = token_logprobs(model, ids, mask, 1.0, chunk_tokens=4)
    assert entropy is None and logp.requires_grad
    _, entropy = token_logprobs(model, ids, mask, 1.0, with_entropy=True, chunk_tokens=4)
    assert entropy is not None and not entropy.requires_grad


def test_no_grad_call_gives_the_same_values():
    model = tiny_model("qwen2", torch.float32)
    ids, mask = padded_batch()
    with_grad, _ = token_logprobs(model, ids, mask, 0.7, chunk_tokens=4)
    with torch.no_grad():
        without, _ = token_logprobs(model, ids, mask, 0.7, chunk_tokens=4)
    assert not without.requires_grad
    torch.testing.assert_close(without, with_grad.detach(), atol=0.0, rtol=0.0)


def saved_bytes(fn) -> tuple[int, int]:
    """(total, largest) bytes of the tensors autograd saves for backward while ``fn`` runs."""
    sizes: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        sizes.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(sizes), max(sizes, default=0)


def test_backward_keeps_no_chunk_of_logits_alive():
    # The memory claim itself: the forward pass leaves nothing of size
    # [tokens, V] (or even [chunk, V]) for the backward pass; only the
    # full-logits path does.
    torch.manual_seed(0)
    vocab, hidden_size, tokens, chunk = 4096, 16, 256, 64
    head = torch.nn.Linear(hidden_size, vocab, bias=False)
    hidden = torch.randn(2, tokens // 2, hidden_size, requires_grad=True)
    targets = torch.randint(0, vocab, (2, tokens // 2))
    one_chunk_fp32 = chunk * vocab * 4

    total_new, largest_new = saved_bytes(
        lambda: head_logprobs(head, hidden, targets, 0.7, with_entropy=True, chunk_tokens=chunk)
    )
    assert largest_new < one_chunk_fp32 and total_new < one_chunk_fp32

    ids = torch.cat([targets[:, :1], targets], dim=1)  # full_logits_logprobs shifts by one
    total_old, _ = saved_bytes(
        lambda: full_logits_logprobs(torch.cat([head(hidden), head(hidden[:, :1])], 1), ids, 0.7, with_entropy=True)
    )
    assert total_old >= tokens * vocab * 4  # at least one full fp32 copy


def test_chunk_tokens_must_be_positive():
    head = torch.nn.Linear(4, 8)
    with pytest.raises(ValueError, match="chunk_tokens"):
        head_logprobs(head, torch.zeros(1, 2, 4), torch.zeros(1, 2, dtype=torch.int64), 1.0, chunk_tokens=0)


def test_model_without_output_head_is_named():
    class Headless(torch.nn.Module):
        def get_output_embeddings(self):
            return None

    with pytest.raises(OutputHeadMissingError, match="Headless"):
        output_head(Headless())
