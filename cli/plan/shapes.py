"""A model's shape from its config alone: no weights are read.

``model_shape`` reads ``config.json`` with transformers' ``AutoConfig`` and
builds the model on the meta device (accelerate's ``init_empty_weights``), so
the parameter count is the architecture's own, embeddings, biases and norms
included, for any size. The built-in example's ``"@prepared"`` model does not
exist before ``up`` builds it: its shape comes from ``[learn.prepare]``.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

PREPARED = "@prepared"


class ModelShape(msgspec.Struct, frozen=True):
    source: str  # the folder (or "[learn.prepare]") the shape was read from
    architecture: str
    params: int  # every parameter
    embedding_params: int  # the input embedding table
    head_params: int  # the output head (0 when tied to the embeddings)
    largest_layer_params: int  # the largest single module's own parameters (ZeRO-3's gather unit)
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    dtype: str  # the checkpoint's torch_dtype

    @property
    def matmul_params(self) -> int:
        """N of ``learner/train/flops.py``: every parameter but an untied input embedding."""
        return self.params - (0 if self.tied else self.embedding_params)

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim


class ShapeError(ValueError):
    """The model's config cannot be read (missing folder, no config.json, unknown architecture)."""


def model_shape(path: str | Path) -> ModelShape:
    """The shape of the model whose config lies in ``path`` (a folder or a config.json)."""
    from transformers import AutoConfig

    p = Path(path)
    if not (p / "config.json").is_file() and not (p.is_file() and p.name.endswith(".json")):
        raise ShapeError(f"{path}: no config.json (a local model folder is needed; nothing is downloaded)")
    try:
        config = AutoConfig.from_pretrained(str(p), local_files_only=True)
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds; the message says which
        raise ShapeError(f"{path}: config.json does not load: {type(e).__name__}: {e}") from None
    return shape_of_config(config, str(path))


def prepared_shape(prepare) -> ModelShape:
    """The built-in example's model as ``[learn.prepare]`` will build it (learner/example/arith_model.py)."""
    from transformers import Qwen2Config

    from rlvr.learner.example.arith_model import VOCAB_SIZE

    config = Qwen2Config(
        vocab_size=VOCAB_SIZE, hidden_size=prepare.hidden, intermediate_size=4 * prepare.hidden,
        num_hidden_layers=prepare.layers, num_attention_heads=prepare.heads, num_key_value_heads=prepare.heads,
        max_position_embeddings=64, tie_word_embeddings=prepare.tie_embeddings, dtype="float32",
    )
    return shape_of_config(config, "[learn.prepare]")


def shape_of_config(config, source: str) -> ModelShape:
    """Count ``config``'s parameters on the meta device and read its dimensions."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    try:
        with init_empty_weights():
            model = AutoModelForCausalLM.from_config(config)
    except Exception as e:  # noqa: BLE001
        raise ShapeError(f"{source}: not a causal LM transformers can build: {type(e).__name__}: {e}") from None
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    text = getattr(config, "get_text_config", lambda: config)()
    # On the meta device the head may not be tied yet: the config says whether it will be.
    tied = head is not None and (head.weight is emb or bool(getattr(text, "tie_word_embeddings", False)))
    unique = {id(p): p for p in model.parameters()}
    params = sum(p.numel() for p in unique.values())
    if tied and head is not None and head.weight is not emb:
        params -= head.weight.numel()
    largest = max(
        (sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules()), default=0
    )
    hidden = int(text.hidden_size)
    heads = int(text.num_attention_heads)
    head_dim = int(getattr(text, "head_dim", None) or hidden // heads)
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float32"
    del model
    return ModelShape(
        source=source, architecture=type(config).__name__.removesuffix("Config"), params=int(params),
        embedding_params=int(emb.numel()), head_params=0 if tied or head is None else int(head.weight.numel()),
        largest_layer_params=int(largest), hidden=hidden, layers=int(text.num_hidden_layers), heads=heads,
        kv_heads=int(getattr(text, "num_key_value_heads", None) or heads), head_dim=head_dim,
        intermediate=int(getattr(text, "intermediate_size", 4 * hidden)), vocab=int(text.vocab_size), tied=tied,
        dtype=str(dtype).removeprefix("torch."),
    )


def lora_params(shape: ModelShape, rank: int, targets: tuple[str, ...]) -> int:
    """Trainable parameters of rank-``rank`` adapters on the Llama/Qwen2 projections ``targets`` name."""
    h, i, kv, q = shape.hidden, shape.intermediate, shape.kv_dim, shape.heads * shape.head_dim
    dims = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
    per_layer = sum(rank * (a + b) for name, (a, b) in dims.items() if any(name.endswith(t) or t.endswith(name)
                                                                          for t in targets))
    return per_layer * shape.layers


__all__ = ["PREPARED", "ModelShape", "ShapeError", "lora_params", "model_shape", "prepared_shape", "shape_of_config"]
