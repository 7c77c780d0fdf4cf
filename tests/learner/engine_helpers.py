"""Shared pieces of the engine tests: the tiny random Qwen2, engines on it,
batches, and the export round trip (safetensors that transformers loads
with the engine's own log-probs), checked the same way under every ZeRO stage."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

from rlvr.learner.train.engine import LearnerEngine, TrainBatchItem
from rlvr.learner.engine_config import OptimizerConfig, TrainEngineConfig

VOCAB = 64


def build_tiny_qwen(path: Path) -> Path:
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True, max_position_embeddings=128,
    )
    Qwen2ForCausalLM(cfg).save_pretrained(path)
    return path


def make_engine(model_dir, **overrides) -> LearnerEngine:
    """A ZeRO-2 engine on the tiny model; ``overrides`` replace config fields."""
    fields = dict(model_path=str(model_dir), zero_stage=2, micro_batch_tokens=48, optimizer=OptimizerConfig(lr=1e-2))
    fields.update(overrides)
    return LearnerEngine(TrainEngineConfig(**fields), seed=0)


def batch(seed: int) -> list[TrainBatchItem]:
    """Six samples of different lengths with behaviour log-probs near the model's."""
    gen = torch.Generator().manual_seed(seed)
    items = []
    for i, n in enumerate([3, 9, 5, 12, 4, 7]):
        completion = torch.randint(0, VOCAB, (n,), generator=gen).tolist()
        behaviour = (-math.log(VOCAB) + 0.3 * torch.randn(n, generator=gen)).tolist()
        items.append(TrainBatchItem([1, 2, 3 + i], completion, behaviour, 1.0 if i % 2 else -1.0, f"t{seed}/{i}"))
    return items


def weights(engine: LearnerEngine) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in engine.full_state_dict().items()}


def assert_export_loads_with_engine_logprobs(engine: LearnerEngine, model_dir: Path, out: Path,
                                             temperature: float) -> list[tuple[str, str, int]]:
    """Export ``engine``'s weights to ``out``; transformers loads them (tied head
    included) and gives the engine's log-probs at ``temperature``."""
    files = engine.export_weights(out)
    tensors = {}
    for name, _, _ in files:
        if name.endswith(".safetensors"):
            from safetensors.torch import load_file

            tensors.update(load_file(out / name))
    assert "lm_head.weight" in tensors and torch.equal(tensors["lm_head.weight"], tensors["model.embed_tokens.weight"])
    shutil.copy(model_dir / "config.json", out / "config.json")
    loaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    prompt, completion = [1, 2, 3], [9, 8, 7, 6, 5]
    with torch.no_grad():
        logits = loaded(torch.tensor([prompt + completion])).logits[0, 2:-1] / temperature
    hf = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(hf, torch.tensor(engine.logprobs(prompt, completion)), atol=1e-4)
    return files
