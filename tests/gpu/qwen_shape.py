"""A random-init model of Qwen2.5-0.5B's shape, built from a config: no download.

The GPU checks need a model of a real size (494M parameters, a 151,936-token
vocabulary, grouped-query attention with 14 query and 2 key/value heads)
but no network. The tokenizer is the built-in example's small BPE, with its
vocabulary padded to 151,936 entries *inside the BPE model* (``<|unused_i|>``
tokens that no merge produces): every id the model can sample then decodes,
and the tokenizer loads in a second, where 150k added tokens would take a
minute per process.

    python -m tests.gpu.qwen_shape OUT_DIR [--layers 24]

``--layers 1`` builds a small stand-in for a dry run on a CPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

QWEN05B = dict(
    vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
    num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)


def _pad_bpe_vocab(tokenizer_json: Path, size: int) -> None:
    data = json.loads(tokenizer_json.read_text())
    vocab = data["model"]["vocab"]
    used = set(vocab.values()) | {t["id"] for t in data.get("added_tokens", [])}
    for i in range(size):
        if i not in used:
            vocab[f"<|unused_bpe_{i}|>"] = i
    tokenizer_json.write_text(json.dumps(data))


def build_qwen05b_shaped(out_dir: Path, *, layers: int = 24, seed: int = 0) -> Path:
    """Write tokenizer + random model (bfloat16 safetensors) to ``out_dir``."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from rlvr.learner.example.tiny_model import EOS_TOKEN, IM_END, build_tiny_model

    out_dir = Path(out_dir)
    build_tiny_model(out_dir, vocab_size=384, hidden=64, layers=1, heads=2, seed=seed)  # tokenizer files
    for f in out_dir.glob("model*.safetensors"):
        f.unlink()
    _pad_bpe_vocab(out_dir / "tokenizer.json", QWEN05B["vocab_size"])
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out_dir)
    assert len(tok) == QWEN05B["vocab_size"], len(tok)
    eos, im_end = tok.convert_tokens_to_ids(EOS_TOKEN), tok.convert_tokens_to_ids(IM_END)
    cfg = Qwen2Config(**{**QWEN05B, "num_hidden_layers": layers}, eos_token_id=eos, pad_token_id=eos,
                      bos_token_id=None, initializer_range=0.02, torch_dtype="bfloat16")
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=[eos, im_end], pad_token_id=eos, bos_token_id=None)
    model.save_pretrained(out_dir)
    return out_dir


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", type=Path)
    p.add_argument("--layers", type=int, default=24)
    args = p.parse_args()
    print(build_qwen05b_shaped(args.out_dir, layers=args.layers))


if __name__ == "__main__":
    main()
