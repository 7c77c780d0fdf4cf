"""The built-in example's model: a character tokenizer and a tiny Qwen2.

Arithmetic wants one token per character (a BPE tokenizer would merge digits
into numbers and hide the structure the model has to learn). The vocabulary
is PAD, EOS, the ten digits and ``+ - * =``, padded with unused tokens to 64
ids (vLLM's CPU kernels like round sizes). Any other character is refused, never
dropped: the tokenizer has no unknown token, so encoding "higher" fails wherever
the folder is loaded, and ``check_encodable`` names the characters before a run
(the warm-up checks every task it will use). The model is a random-init Qwen2,
d=128, 3 layers, 4 heads (head size 32, one vLLM's CPU attention accepts):
about 0.8M parameters (the shape of the experiment docs/design.md reports). Both
transformers and vLLM load the saved folder offline.

Embeddings are untied by default. The SFT warm-up of the built-in example
(seed 0, batch 128, greedy pass@1 on 200 held-out problems) measured:

- tied, lr 2e-3 (the earlier default): 29.5% after 2,000 steps;
- tied, lr 1e-3: 14% after 550 steps, loss ~0.7 nats/token;
- untied, lr 2e-3: 24.5% after 700 steps, loss ~0.6;
- untied, lr 1e-3: 22.5% at step 250, 74.5% at step 550, loss 0.26.

On the plateau the model gets the magnitude right and the units digit wrong
("29+06=36"); RL from there gained ~2.5 points per 100 steps. Untied at 1e-3
the warm-up is the sharp jump docs/design.md describes, and RL started on the
way up keeps climbing (README "The built-in example").
"""

from __future__ import annotations

from pathlib import Path

CHARS = "0123456789+-*="
PAD, EOS = "<pad>", "<eos>"
# The unknown-token name the tokenizer is built with, deliberately not in its vocabulary: any other
# character makes encoding fail ("WordLevel error: Missing [UNK] token"), in every process that loads
# the folder (transformers, vLLM), rather than becoming a pad token the model never sees as text.
_NO_UNKNOWN = "<no-unknown-characters>"
VOCAB_SIZE = 64
# The multi-turn examples' chat template (examples/calculator.toml): every message is
# its content, an assistant turn ends with EOS, and there is no generation prompt, so
# "37*4=" + a turn "=" + the calculator's "148=" + a turn "148" is "37*4==<eos>148=148<eos>".
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['content'] }}{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}"
    "{% endfor %}"
)


class CharsNotEncodableError(ValueError):
    """Text with characters the character tokenizer has no token for (it encodes only ``CHARS``)."""


def unencodable(text: str) -> list[str]:
    """The characters of ``text`` the tokenizer cannot encode, each once, in order (PAD and EOS are tokens)."""
    rest = text.replace(PAD, "").replace(EOS, "")
    return list(dict.fromkeys(c for c in rest if c not in CHARS))


def check_encodable(text: str, where: str = "text") -> None:
    """Refuse, naming the characters, text the tokenizer would refuse with its own terse error."""
    bad = unencodable(text)
    if bad:
        raise CharsNotEncodableError(
            f"{where} {text[:80]!r} has characters the built-in example's character tokenizer cannot encode: "
            f"{' '.join(map(repr, bad))} (it encodes only {CHARS!r}); its tasks must be bare arithmetic "
            f"such as '37+45=' (prompt_style = \"bare\")")


def build_tokenizer(chat: bool = False):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {PAD: 0, EOS: 1, **{c: i + 2 for i, c in enumerate(CHARS)}}
    vocab.update({f"<unused{i}>": i for i in range(len(vocab), VOCAB_SIZE)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=_NO_UNKNOWN))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, padding_side="left")
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    return fast


def build_arith_model(
    out_dir: Path, *, hidden: int = 128, layers: int = 3, heads: int = 4, seed: int = 0, tie_embeddings: bool = False,
    chat: bool = False,
) -> Path:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    if hidden % heads or hidden // heads not in (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512):
        raise ValueError(f"head size {hidden}/{heads} is not one vLLM's CPU attention supports")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(chat)
    config = Qwen2Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=64,
        tie_word_embeddings=tie_embeddings,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
