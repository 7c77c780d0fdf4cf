"""Per-token log-probs and entropy of a causal LM, chunked over tokens.

The learner needs log softmax(logits / T) of each target token and, for the
entropy metric and bonus, the entropy of that distribution. Computing them
from the model's ``logits`` materialises [B, T, V] logits, upcast to fp32,
for the whole micro-batch: with a 151k vocabulary that is ~10 GB per copy
for 16k tokens, and the old path kept several copies alive (bf16 logits,
fp32 logits, their temperature-scaled copy, the softmax for the entropy).

Here the model returns its final hidden states instead (``logits_to_keep=1``
makes the head project one position only), and the output head is applied
to ``chunk_tokens`` positions at a time. Only one chunk's logits exist in
fp32 at a time; each chunk runs under non-reentrant activation
checkpointing, so the backward pass recomputes a chunk's logits when it
reaches it instead of keeping every chunk's alive from the forward pass.
The head is called as a module (never through its ``.weight``), so ZeRO-3
gathers it, and a bias or an adapter wrapped around it is applied; only the
softmax part has a hand-written backward (``_TargetLogprob``), which works
in one fp32 buffer in place where autograd's chain would keep several.

PPO's critic (``advantage.name = "gae"``) reads the same hidden states: ``value_head`` maps
each position that predicts a target to that state's value (``micro_batch_logprobs_values``), so
the values cost no forward pass of their own.

``full_logits_logprobs`` is the previous computation, kept as the reference
the tests and ``bench/learner_memory.py`` compare against.

Packed rows (batching.py) come with ``position_ids`` and no attention mask:
the model then keeps attention within each sample (transformers' packed
sequence detection); the log-probs come back in the row's layout and the
engine maps them to samples (``MicroBatch.unpack``).

Not covered: the policy loss (algos/), grouping samples (batching.py), fused
linear + cross-entropy kernels (a CPU-testable pure-torch path was chosen).
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from rlvr.learner.train.batching import MicroBatch

# Positions per chunk: at V = 151,936 one chunk of fp32 logits is
# 1024 x 151,936 x 4 B = 0.62 GB; a chunk's forward holds about three such
# buffers (the head's output, the scaled logits, the entropy's probabilities)
# and its backward about two, for one chunk at a time.
LOGPROB_CHUNK_TOKENS = 1024


class OutputHeadMissingError(RuntimeError):
    """The model has no output embeddings (``get_output_embeddings()`` is None)."""


def output_head(module: torch.nn.Module) -> torch.nn.Module:
    """The module that projects hidden states to vocabulary logits.

    A DeepSpeed engine forwards unknown attributes to the model it wraps,
    and PEFT models forward them to their base model, so
    ``get_output_embeddings`` reaches the Hugging Face model through both.
    """
    head = module.get_output_embeddings()
    if head is None:
        raise OutputHeadMissingError(
            f"{type(module).__name__}.get_output_embeddings() is None: cannot compute token log-probs"
        )
    return head


def final_hidden_states(
    module: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """The last decoder layer's normed output: [B, T, H].

    The call goes through ``module`` itself (the DeepSpeed engine when there
    is one) so the engine's forward bookkeeping and backward hooks run.
    ``hidden_states[-1]`` is the model's ``last_hidden_state`` (after the
    final norm) in transformers 5; ``logits_to_keep=1`` leaves the head's own
    projection at [B, 1, V], unused. Packed rows: ``attention_mask`` None and
    ``position_ids`` restarting at 0 for each sample.
    """
    out = module(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=False,
        output_hidden_states=True,
        logits_to_keep=1,
    )
    return out.hidden_states[-1]


class _TargetLogprob(torch.autograd.Function):
    """z [n, V] (the head's output, any float dtype), targets [n] -> log softmax(z / T)[target] [n]
    fp32, and logz [n] (no gradient).

    Autograd's own chain (upcast, divide, logsumexp, gather) keeps about five
    [n, V] fp32 buffers alive at once in its backward; this one rebuilds the
    softmax in one fp32 buffer, in place: d logp / d x = onehot - softmax(x).
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor, targets: torch.Tensor, temperature: float):
        x = z.to(torch.float32, copy=True).div_(temperature)  # [n, V]; z itself stays intact (it is saved)
        logz = torch.logsumexp(x, dim=-1)  # [n]
        logp = x.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz  # [n]
        ctx.save_for_backward(z, targets, logz)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(logz)
        return logp, logz

    @staticmethod
    def backward(ctx, grad_logp: torch.Tensor, _grad_logz: torch.Tensor):
        z, targets, logz = ctx.saved_tensors
        g = (grad_logp / ctx.temperature).unsqueeze(-1)  # [n, 1]; the 1/T of x = z / T
        grad = z.to(torch.float32, copy=True).div_(ctx.temperature)  # [n, V], one buffer from here on
        grad.sub_(logz.unsqueeze(-1)).exp_().mul_(-g)  # -softmax(x) * g / T
        grad.scatter_add_(-1, targets.unsqueeze(-1), g)  # + onehot * g / T
        return grad.to(z.dtype), None, None


def _chunk(
    head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden [n, H], targets [n] -> logp [n] (fp32), entropy [n] (fp32, no grad; empty unless asked)."""
    z = head(hidden)  # [n, V] in the head's dtype
    logp, logz = _TargetLogprob.apply(z, targets, temperature)
    # Last, and without grad: a checkpoint's recomputation stops once it has
    # rebuilt every saved tensor, so the backward pass never redoes this.
    with torch.no_grad():
        if with_entropy:
            logprobs = z.to(torch.float32, copy=True).div_(temperature).sub_(logz.unsqueeze(-1))  # [n, V]
            entropy = -logprobs.exp().mul_(logprobs).sum(-1)  # [n]; in place: one [n, V] temporary, not two
        else:
            entropy = logp.new_empty(0)
    return logp, entropy


def head_logprobs(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    *,
    with_entropy: bool = False,
    chunk_tokens: int = LOGPROB_CHUNK_TOKENS,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(head(hidden) / T)[target] per position, ``chunk_tokens`` positions at a time.

    hidden [B, S, H] (the positions that predict ``targets``), targets [B, S]
    -> logp [B, S] fp32 with gradient, entropy [B, S] fp32 without (None
    unless ``with_entropy``).
    """
    if chunk_tokens <= 0:
        raise ValueError(f"chunk_tokens must be positive, got {chunk_tokens}")
    shape = targets.shape
    flat_h = hidden.reshape(-1, hidden.shape[-1])  # [N, H]
    flat_t = targets.reshape(-1)  # [N]
    # Checkpointing only pays when a backward pass will follow.
    recompute = torch.is_grad_enabled() and (flat_h.requires_grad or any(p.requires_grad for p in head.parameters()))
    logps, entropies = [], []
    for start in range(0, flat_t.numel(), chunk_tokens):
        h, t = flat_h[start : start + chunk_tokens], flat_t[start : start + chunk_tokens]
        if recompute:
            logp, entropy = checkpoint(_chunk, head, h, t, temperature, with_entropy, use_reentrant=False)
        else:
            logp, entropy = _chunk(head, h, t, temperature, with_entropy)
        logps.append(logp)
        entropies.append(entropy)
    if not logps:  # no positions at all
        empty = flat_h.new_zeros(shape, dtype=torch.float32)
        return empty, (empty if with_entropy else None)
    logp = torch.cat(logps).view(shape)
    return logp, (torch.cat(entropies).view(shape) if with_entropy else None)


def token_logprobs(
    module: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    temperature: float,
    *,
    with_entropy: bool = False,
    chunk_tokens: int = LOGPROB_CHUNK_TOKENS,
    position_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """input_ids, attention_mask [B, T] -> logp of ids[:, 1:] [B, T-1], entropy [B, T-1] or None.

    Packed rows: ``attention_mask=None`` and ``position_ids`` [B, T]; a
    position that ends a sample then "predicts" the next sample's first
    token, a value the caller drops."""
    logp, entropy, _ = _logprobs_values(module, input_ids, attention_mask, temperature, with_entropy=with_entropy,
                                        chunk_tokens=chunk_tokens, position_ids=position_ids)
    return logp, entropy


def _logprobs_values(
    module: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    temperature: float,
    *,
    with_entropy: bool,
    chunk_tokens: int,
    position_ids: torch.Tensor | None,
    value_head: torch.nn.Module | None = None,
    detach_values: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """``token_logprobs``, and with ``value_head`` the value of each position that predicts a
    target: [B, T-1] fp32, with gradient (None without a head); ``detach_values``: the gradient
    reaches the head only, never the trunk (the critic's warm-up)."""
    hidden = final_hidden_states(module, input_ids, attention_mask, position_ids)  # [B, T, H]
    logp, entropy = head_logprobs(
        output_head(module), hidden[:, :-1], input_ids[:, 1:], temperature,
        with_entropy=with_entropy, chunk_tokens=chunk_tokens,
    )
    # Called as a module: under ZeRO-3 its hooks gather its parameters.
    states = hidden[:, :-1].detach() if detach_values else hidden[:, :-1]
    values = value_head(states).squeeze(-1).float() if value_head is not None else None
    return logp, entropy, values


def micro_batch_logprobs(
    module: torch.nn.Module,
    mb: MicroBatch,
    temperature: float,
    device: torch.device,
    *,
    with_entropy: bool = False,
    chunk_tokens: int = LOGPROB_CHUNK_TOKENS,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A micro-batch's log-probs and entropy in its per-sample layout [B, T-1],
    whether its rows are padded or packed."""
    logp, entropy, _ = micro_batch_logprobs_values(module, mb, temperature, device, None,
                                                   with_entropy=with_entropy, chunk_tokens=chunk_tokens)
    return logp, entropy


def micro_batch_logprobs_values(
    module: torch.nn.Module,
    mb: MicroBatch,
    temperature: float,
    device: torch.device,
    value_head: torch.nn.Module | None,
    *,
    with_entropy: bool = False,
    chunk_tokens: int = LOGPROB_CHUNK_TOKENS,
    detach_values: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """``micro_batch_logprobs`` and, with ``value_head``, each target position's value: all three
    in the per-sample layout [B, T-1], from one forward pass."""
    ids = mb.input_ids.to(device)  # [R, W]
    if mb.position_ids is None:
        return _logprobs_values(module, ids, mb.attention_mask.to(device), temperature, with_entropy=with_entropy,
                                chunk_tokens=chunk_tokens, position_ids=None, value_head=value_head,
                                detach_values=detach_values)
    logp, entropy, values = _logprobs_values(module, ids, None, temperature, with_entropy=with_entropy,
                                             chunk_tokens=chunk_tokens, position_ids=mb.position_ids.to(device),
                                             value_head=value_head, detach_values=detach_values)  # [1, W-1]
    return (mb.unpack(logp), mb.unpack(entropy) if entropy is not None else None,
            mb.unpack(values) if values is not None else None)


def full_logits_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float, *, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The previous, unchunked computation from the model's logits [B, T, V]:
    the reference for tests and the memory benchmark."""
    scaled = logits[:, :-1].float() / temperature  # [B, T-1, V]
    logz = torch.logsumexp(scaled, dim=-1)  # [B, T-1]
    logp = scaled.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1) - logz  # [B, T-1]
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = logz - (torch.softmax(scaled, dim=-1) * scaled).sum(-1)  # [B, T-1]
    return logp, entropy


__all__ = [
    "LOGPROB_CHUNK_TOKENS",
    "OutputHeadMissingError",
    "final_hidden_states",
    "full_logits_logprobs",
    "head_logprobs",
    "micro_batch_logprobs",
    "micro_batch_logprobs_values",
    "output_head",
    "token_logprobs",
]
