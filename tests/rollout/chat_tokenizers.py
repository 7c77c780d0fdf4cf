"""Small local tokenizers that carry a real model's published chat template (tests/data/chat_templates/).

Each is a byte-level BPE trained on a few sentences, with the template's
special tokens registered as single tokens, as in the model's own tokenizer;
the template is the vendored file, unchanged. Nothing is downloaded.
"""

from __future__ import annotations

from functools import cache

from tests.conftest import REPO

TEMPLATES = REPO / "tests" / "data" / "chat_templates"
# template file -> (special tokens, the tokenizer's named ones)
SPECIALS = {
    "qwen2.5": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "qwen3": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "llama3": (["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>",
                "<|python_tag|>"], {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "smollm2": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
                 "unk_token": "<|endoftext|>"}),
}
CORPUS = [
    "What is 2+3? The answer is 5. Are you sure? Yes, I am sure.",
    "<think>hmm, let me add</think> system user assistant tool ipython",
    '<tool_call>{"name": "calc", "arguments": {"expr": "2+3"}}</tool_call> <tool_response>5</tool_response>',
    "You are a helpful assistant. Cutting Knowledge Date: December 2023 Today Date: 26 Jul 2024",
]


@cache
def chat_tokenizer(name: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials, named = SPECIALS[name]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **named)
    fast.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
    return fast
