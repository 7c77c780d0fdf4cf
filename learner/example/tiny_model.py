"""Build tiny, random-init causal LMs with a locally trained tokenizer.

Tests and the built-in demo need a real Hugging Face model folder that both
transformers and vLLM (CPU) load offline. This module trains a byte-level BPE
tokenizer on a small corpus on the spot, builds a random-init Qwen2 or Llama
config with tied embeddings, and saves both with ``save_pretrained``. Nothing
is downloaded; the same arguments give byte-identical weights and tokenizer.

What it does not cover: training the model (the weights stay random), or any
real-world tokenizer quality.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

EOS_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (EOS_TOKEN, IM_START, IM_END)

# ChatML, as Qwen models use it. The assistant turn ends with <|im_end|>, which
# is therefore an end-of-sequence id next to <|endoftext|>.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Head sizes vLLM's CPU attention backend accepts (vllm 0.32, cpu_attn.py).
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

DEFAULT_CORPUS = (
    "12+7=19",
    "45-13=32",
    "3*4=12",
    "What is 8+5? The answer is 13.",
    "Solve: 99-100 = -1. So the answer is \\boxed{-1}.",
    "The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b\n",
    "Let x be a number. Then 2x + 3 = 11 gives x = 4.",
    "<think>reasoning</think><answer>42</answer>",
    "0123456789 +-*/=()[]{}<>.,:;!?'\"",
)


def _train_tokenizer(corpus: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Repeat the corpus so merges have counts > 1; order is fixed -> deterministic.
    tok.train_from_iterator([line for line in corpus for _ in range(4)], trainer=trainer)
    return tok


def build_tiny_model(
    out_dir: Path,
    *,
    vocab_size: int = 384,
    hidden: int = 128,
    layers: int = 2,
    heads: int = 4,
    tie_embeddings: bool = True,
    seed: int = 0,
    corpus: list[str] | None = None,
    arch: Literal["qwen2", "llama"] = "qwen2",
    init_std: float = 0.1,
    max_positions: int = 2048,
) -> Path:
    """Write a tokenizer + random-init model to ``out_dir`` and return it.

    ``vocab_size`` is a target: the tokenizer is trained towards it and the
    vocabulary is then padded with unused tokens to a multiple of 64, and the
    model's ``vocab_size`` equals the tokenizer's length exactly, so every id
    the model can sample decodes. ``hidden // heads`` must be a head size
    vLLM's CPU backend supports (32, 64, ...), hence ``hidden=128, heads=4``.
    ``init_std`` is larger than the usual 0.02 so the next-token distribution
    is far from uniform and log-prob tests can tell weights apart.
    """
    import torch
    from transformers import (
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    if hidden % heads or hidden // heads not in VLLM_CPU_HEAD_SIZES:
        raise ValueError(
            f"hidden/heads = {hidden}/{heads} gives head size {hidden / heads:g}; "
            f"vLLM on CPU needs one of {VLLM_CPU_HEAD_SIZES}"
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    raw = _train_tokenizer(list(corpus or DEFAULT_CORPUS), vocab_size)
    n = raw.get_vocab_size()
    padded = max(vocab_size, -(-n // 64) * 64)
    raw.add_tokens([f"<|unused_{i}|>" for i in range(padded - n)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        additional_special_tokens=[IM_START, IM_END],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.model_max_length = max_positions
    tokenizer.save_pretrained(out_dir)

    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    im_end_id = tokenizer.convert_tokens_to_ids(IM_END)
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tie_embeddings,
        initializer_range=init_std,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        bos_token_id=None,
        rope_theta=10000.0,
    )
    if arch == "qwen2":
        config, cls = Qwen2Config(**common), Qwen2ForCausalLM
    else:
        config, cls = LlamaConfig(**common), LlamaForCausalLM
    torch.manual_seed(seed)
    model = cls(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=[eos_id, im_end_id], pad_token_id=eos_id, bos_token_id=None
    )
    model.save_pretrained(out_dir)
    return out_dir


__all__ = ["CHAT_TEMPLATE", "EOS_TOKEN", "IM_END", "IM_START", "build_tiny_model"]
