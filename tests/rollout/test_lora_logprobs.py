"""LoRA end to end on CPU: the learner trains an adapter (DeepSpeed ZeRO-2),
exports it alone, the hf and vllm engines apply it on their base model, and
the behaviour log-probs of their completions match the learner's own
log-probs under the same adapter (max abs difference <= 0.01, the same check
as the full-weight path). Also: a later adapter replaces the earlier one
without a base reload, a corrupt adapter is rejected and the old one serves.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest

from rlvr.protocol import SamplingParams, WeightFile
from rlvr.rollout.engines import WeightsRejectedError
from tests.rollout.conftest import MAX_MODEL_LEN, MAX_PROMPT_TOKENS, _vllm_importable

TOL = 0.01
PROMPT = "Solve: 12+7="
RANK = 8
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


class LoraLearner:
    """A LoRA learner on the tiny model and the adapters it exported, by version."""

    def __init__(self, model: Path, root: Path) -> None:
        import torch

        from rlvr.learner.train.engine import LearnerEngine, TrainBatchItem
        from rlvr.learner.engine_config import LoraConfig, OptimizerConfig, TrainEngineConfig

        saved = dict(os.environ)  # the dist env DeepSpeed needs must not reach vLLM's spawned core
        self.engine = LearnerEngine(
            TrainEngineConfig(
                model_path=str(model), zero_stage=2, temperature=0.7, optimizer=OptimizerConfig(lr=1e-2),
                lora=LoraConfig(enabled=True, rank=RANK, alpha=16.0),
            ),
            seed=0,
        )
        os.environ.clear()
        os.environ.update(saved)
        self.root = root
        self.torch = torch
        items = [TrainBatchItem([5, 6, 7], [8, 9, 10, 11], [-5.0] * 4, 1.0, "a"),
                 TrainBatchItem([5, 6, 7], [12, 13, 14], [-5.0] * 3, -1.0, "b")]
        self.engine.train_step(items)  # one real LoRA step: B moves off zero
        self.dirs: dict[int, Path] = {}

    def export(self, version: int, noise_seed: int) -> Path:
        """Move every adapter B by seeded noise (so the adapter changes the
        policy clearly), export it, and return its directory."""
        g = self.torch.Generator().manual_seed(noise_seed)
        with self.torch.no_grad():
            for name, p in self.engine.ds.module.named_parameters():
                if ".lora_B." in name:
                    p.add_(0.3 * self.torch.randn(p.shape, generator=g))
        out = self.root / f"v{version}"
        files = self.engine.export_weights(out)
        assert [n for n, _, _ in files] == ["adapter_model.safetensors", "adapter_config.json"]
        self.dirs[version] = out
        return out

    def max_diff(self, result: Any) -> float:
        worst = 0.0
        for g in result.generations:
            ref = self.engine.logprobs(result.prompt_ids, g.ids)
            worst = max([worst] + [abs(a - b) for a, b in zip(g.logprobs, ref, strict=True)])
        return worst


@pytest.fixture(scope="module")
def learner(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoraLearner]:
    lr = LoraLearner(tiny_model, tmp_path_factory.mktemp("adapters"))
    yield lr
    lr.engine.close()


@pytest.fixture(scope="module")
def lora_vllm_engine(tiny_model: Path, loop: Any, learner: LoraLearner) -> Iterator[Any]:
    reason = _vllm_importable()
    if reason:
        pytest.skip(reason)
    from rlvr.rollout.engines import VLLMEngineConfig, make_engine

    cfg = VLLMEngineConfig(
        model=str(tiny_model), dtype="float32", max_model_len=MAX_MODEL_LEN, max_prompt_tokens=MAX_PROMPT_TOKENS,
        kv_cache_memory_bytes=64 << 20, max_num_seqs=32, max_lora_rank=RANK,
    )
    engine = make_engine(cfg)
    loop.run(engine.start(), timeout=300)
    yield engine
    loop.run(engine.close(), timeout=60)


@pytest.fixture(params=["hf", pytest.param("vllm", marks=pytest.mark.slow)])
def lora_engine(request: pytest.FixtureRequest, loop: Any, weight_dirs: dict[str, Path], versions: Any) -> Iterator[Any]:
    engine = request.getfixturevalue("hf_engine" if request.param == "hf" else "lora_vllm_engine")
    yield engine
    if request.param == "hf":  # the session-wide hf engine goes back to plain base weights
        loop.run(engine.load_weights(weight_dirs["base"], next(versions)))


def test_rollout_logprobs_under_the_adapter_match_the_learners(loop, lora_engine, learner, versions, reference,
                                                               weight_dirs):
    v = next(versions)
    loop.run(lora_engine.load_adapter(learner.export(v, noise_seed=v), v))
    assert lora_engine.weights_version == v
    result = loop.run(lora_engine.generate(PROMPT, 4, SamplingParams(temperature=0.7, max_tokens=12, seed=3)))
    assert result.weights_version_min == result.weights_version_max == v
    diff = learner.max_diff(result)
    base = reference.max_diff(weight_dirs["base"], result, 0.7)
    print(f"max |logprob diff| rollout vs learner under adapter v{v}: {diff:.2e} (vs the base model {base:.2f})")
    assert diff <= TOL
    assert base > 0.1, "the adapter did not change the policy"


def test_a_new_adapter_replaces_the_old_and_a_bad_one_is_rejected(loop, lora_engine, learner, versions):
    v1 = next(versions)
    loop.run(lora_engine.load_adapter(learner.export(v1, noise_seed=v1), v1))
    v2 = next(versions)
    loop.run(lora_engine.load_adapter(learner.export(v2, noise_seed=v2), v2))
    sampling = SamplingParams(temperature=0.7, max_tokens=12, seed=5)
    result = loop.run(lora_engine.generate(PROMPT, 4, sampling))
    assert result.weights_version_max == v2 and learner.max_diff(result) <= TOL
    # A corrupt adapter (sha256 differs from the announcement, or a wrong rank) keeps v2 in service.
    bad = learner.dirs[v2]
    size = (bad / "adapter_model.safetensors").stat().st_size
    with pytest.raises(WeightsRejectedError, match="sha256"):
        loop.run(lora_engine.load_adapter(bad, v2 + 100, [WeightFile("adapter_model.safetensors", "0" * 64, size)]))
    wrong_rank = bad.parent / "wrong_rank"
    shutil.copytree(bad, wrong_rank, dirs_exist_ok=True)
    cfg = (wrong_rank / "adapter_config.json").read_text().replace(f'"r": {RANK}', '"r": 4')
    (wrong_rank / "adapter_config.json").write_text(cfg)
    with pytest.raises(WeightsRejectedError, match="lora_A.weight: shape"):
        loop.run(lora_engine.load_adapter(wrong_rank, v2 + 101))
    assert lora_engine.weights_version == v2
    again = loop.run(lora_engine.generate(PROMPT, 4, sampling))
    assert again.weights_version_max == v2 and learner.max_diff(again) <= TOL


def _peft_max_diff(model_dir: Path, adapter_dir: Path, result: Any, temperature: float) -> float:
    """Worst |log-prob difference| of ``result`` against transformers + peft with ``adapter_dir``."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32"), adapter_dir)
    worst = 0.0
    for g in result.generations:
        with torch.no_grad():
            logits = model(torch.tensor([result.prompt_ids + g.ids])).logits[0, len(result.prompt_ids) - 1 : -1]
        lp = torch.log_softmax(logits.float() / temperature, -1).gather(-1, torch.tensor(g.ids).unsqueeze(-1))
        worst = max([worst] + [abs(a - b) for a, b in zip(g.logprobs, lp.squeeze(-1).tolist(), strict=True)])
    return worst


def test_a_request_keeps_the_adapter_version_it_ran_under(loop, lora_engine, learner, versions, tiny_model):
    """A group generated while the next adapter loads reports one version, and its
    log-probs are those of that version's adapter (whichever won the race)."""
    import asyncio

    v1 = next(versions)
    loop.run(lora_engine.load_adapter(learner.export(v1, noise_seed=v1), v1))
    v2 = next(versions)
    d2 = learner.export(v2, noise_seed=v2)

    async def race():
        sampling = SamplingParams(temperature=0.7, max_tokens=48, seed=9)
        return await asyncio.gather(lora_engine.generate(PROMPT, 4, sampling), lora_engine.load_adapter(d2, v2))

    result, _ = loop.run(race())
    assert result.weights_version_min == result.weights_version_max in (v1, v2)
    used = learner.dirs[result.weights_version_max]
    print(f"group ran under v{result.weights_version_max} (v{v2} loaded meanwhile)")
    assert _peft_max_diff(tiny_model, used, result, 0.7) <= TOL
    assert lora_engine.weights_version == v2
