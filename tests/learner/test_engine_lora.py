"""LoRA in the DeepSpeed engine (ZeRO-2, CPU), on the tiny random Qwen2:
only the adapters train while the base stays frozen, the adapter export is
small and loads in peft with the engine's log-probs, the merged state dict
is the same policy, a checkpoint holds the adapter and restores bit for bit,
and settings that cannot work are refused naming their key."""

import json

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rlvr.learner.engine_config import LoraConfig
from rlvr.learner.train.lora import LoraConfigError
from tests.learner.engine_helpers import batch, make_engine

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

LORA = LoraConfig(enabled=True, rank=4, alpha=8.0)


def _module_state(engine) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in engine.ds.module.state_dict().items()}


def _hf_logprobs(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)


def test_lora_trains_only_the_adapters_and_the_base_stays_frozen(model_dir):
    engine = make_engine(model_dir, lora=LORA)
    trainable = {n for n, p in engine.ds.module.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert {n.split(".")[-4] for n in trainable} == set(LORA.target_modules)
    before = _module_state(engine)
    lp = engine.logprobs([1, 2, 3], [4, 5, 6])
    for s in range(3):
        engine.train_step(batch(s))
    after = _module_state(engine)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and changed <= trainable
    assert engine.logprobs([1, 2, 3], [4, 5, 6]) != lp
    engine.close()


def test_adapter_export_is_small_and_loads_in_peft_with_the_engines_logprobs(model_dir, tmp_path):
    engine = make_engine(model_dir, lora=LORA)
    for s in range(2):
        engine.train_step(batch(s))
    files = engine.export_weights(tmp_path)
    names = [n for n, _, _ in files]
    assert names == ["adapter_model.safetensors", "adapter_config.json"] and engine.adapter
    tensors = load_file(tmp_path / "adapter_model.safetensors")
    assert tensors and all(".lora_A.weight" in k or ".lora_B.weight" in k for k in tensors)
    # Hidden size 32 and rank 4: a quarter of the model; a real model's adapter is ~1%.
    assert sum(size for _, _, size in files) < (model_dir / "model.safetensors").stat().st_size / 3
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8.0 and config["peft_type"] == "LORA"
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    loaded = PeftModel.from_pretrained(base, tmp_path).eval()
    prompt, completion = [1, 2, 3], [9, 8, 7, 6, 5]
    got = _hf_logprobs(loaded, prompt, completion)
    assert torch.allclose(got, torch.tensor(engine.logprobs(prompt, completion)), atol=1e-4)
    # The merged state dict (reference refresh) is the same policy under plain HF names.
    merged = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    merged.load_state_dict(engine.full_state_dict(), strict=False)
    assert torch.allclose(_hf_logprobs(merged, prompt, completion), got, atol=1e-4)
    engine.close()


def test_lora_checkpoint_holds_the_adapter_and_restores_bit_for_bit(model_dir, tmp_path):
    first = make_engine(model_dir, lora=LORA)
    for s in range(2):
        first.train_step(batch(s))
    first.save_checkpoint(tmp_path, {"consumer_seq": 7})
    tail = [first.train_step(batch(s))["loss"] for s in range(2, 4)]
    restarted = make_engine(model_dir, lora=LORA)
    assert restarted.load_checkpoint(tmp_path) == {"consumer_seq": 7} and restarted.step == 2
    assert [restarted.train_step(batch(s))["loss"] for s in range(2, 4)] == tail
    a, b = _module_state(first), _module_state(restarted)
    assert all(torch.equal(a[k], b[k]) for k in a)
    first.close()
    restarted.close()


def test_qlora_on_cpu_is_refused_naming_the_key(model_dir):
    with pytest.raises(LoraConfigError, match="learn.engine.lora.quantize_base"):
        make_engine(model_dir, lora=LoraConfig(enabled=True, quantize_base="4bit"))


def test_target_modules_missing_from_the_model_are_refused_naming_the_key(model_dir):
    with pytest.raises(LoraConfigError, match="learn.engine.lora.target_modules"):
        make_engine(model_dir, lora=LoraConfig(enabled=True, target_modules=("no_such_proj",)))


def test_lora_under_zero3_is_refused_naming_the_keys():
    import msgspec

    from rlvr.learner.engine_config import TrainEngineConfig

    with pytest.raises(msgspec.ValidationError, match="lora.enabled with zero_stage = 3"):
        msgspec.convert({"model_path": "m", "zero_stage": 3, "lora": {"enabled": True}}, TrainEngineConfig)
