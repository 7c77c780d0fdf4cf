"""PPO's critic: a value head on the policy, trained with GAE and the clipped value loss in the
learner's DeepSpeed engine (real DeepSpeed on CPU, the tiny local Qwen2)."""

from __future__ import annotations

import msgspec
import pytest
import torch

from rlvr.learner.algos.config import AdvantageConfig, CriticConfig
from rlvr.learner.engine_config import LoraConfig, OptimizerConfig, TrainEngineConfig
from rlvr.learner.train.batching import micro_batches
from rlvr.learner.train.critic import VALUE_HEAD, CriticUnsupportedError, value_head
from rlvr.learner.train.token_logprobs import micro_batch_logprobs_values
from tests.learner.engine_helpers import assert_export_loads_with_engine_logprobs, batch, make_engine, weights


def ppo(**critic) -> dict:
    return {"advantage": AdvantageConfig(name="gae", gamma=1.0, lam=0.95, critic=CriticConfig(lr=0.05, **critic)),
            "optimizer": OptimizerConfig(lr=1e-2)}


def rewarded(seed: int):
    """The helpers' batch with a reward per sample (1 for half of them)."""
    return [msgspec.structs.replace(it, reward=float(i % 2)) for i, it in enumerate(batch(seed))]


def head_state(engine) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in value_head(engine.ds.module).state_dict().items()}


def probe_values(engine) -> torch.Tensor:
    mb = micro_batches(rewarded(9), 1 << 20, 0)[0]
    with torch.no_grad():
        _, _, v = micro_batch_logprobs_values(engine.ds, mb, 1.0, engine._device, value_head(engine.ds.module))
    return v[mb.loss_mask]


def test_a_ppo_step_trains_the_head_and_reports_the_critic(model_dir):
    engine = make_engine(model_dir, **ppo())
    assert torch.count_nonzero(probe_values(engine)) == 0  # the head starts at 0
    before = weights(engine)
    m = engine.train_step(rewarded(0))
    for key in ("value_loss", "value_clip_frac", "explained_variance", "value_mean", "return_mean", "lr_critic"):
        assert key in m, key
    assert m["value_mean"] == 0.0  # old values: the untrained head
    # Rewards 1 on 3 of 6 samples, γ = 1: every token's return is its sample's reward.
    assert m["return_mean"] > 0.0 and m["value_loss"] > 0.0 and m["lr_critic"] == 0.05
    assert torch.count_nonzero(probe_values(engine)) > 0  # the head moved
    after = weights(engine)
    assert any(not torch.equal(before[k], after[k]) for k in before)  # and the policy
    assert not any(k.startswith(VALUE_HEAD) for k in after)  # exports never carry the head
    assert engine.critic_steps == 1 and m["critic_warmup"] == 0.0
    engine.close()


def test_warm_up_steps_train_only_the_critic(model_dir):
    engine = make_engine(model_dir, **ppo(warmup_steps=2))
    before, head0 = weights(engine), head_state(engine)
    for step in range(2):
        m = engine.train_step(rewarded(step))
        assert m["critic_warmup"] == 1.0
    during = weights(engine)
    assert all(torch.equal(before[k], during[k]) for k in before)  # the policy did not move
    assert any(not torch.equal(head0[k], v) for k, v in head_state(engine).items())
    m = engine.train_step(rewarded(2))
    assert m["critic_warmup"] == 0.0
    assert any(not torch.equal(during[k], v) for k, v in weights(engine).items())
    engine.close()


def test_the_critic_resumes_exactly_from_a_checkpoint(model_dir, tmp_path):
    cfg = ppo(warmup_steps=1)
    engine = make_engine(model_dir, **cfg)
    engine.train_step(rewarded(0))
    engine.save_checkpoint(tmp_path / "ckpt", {})
    m_first = engine.train_step(rewarded(1))
    values_first, head_first, policy_first = probe_values(engine), head_state(engine), weights(engine)
    engine.close()

    resumed = make_engine(model_dir, **cfg)
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert resumed.critic_steps == 1  # the warm-up is over and stays over
    m_again = resumed.train_step(rewarded(1))
    assert m_again["critic_warmup"] == 0.0
    for key in ("value_loss", "explained_variance", "value_mean", "return_mean", "loss"):
        assert m_again[key] == m_first[key], key
    assert torch.equal(probe_values(resumed), values_first)
    assert all(torch.equal(head_first[k], v) for k, v in head_state(resumed).items())
    assert all(torch.equal(policy_first[k], v) for k, v in weights(resumed).items())
    resumed.close()


def test_the_export_is_the_policy_alone(model_dir, tmp_path):
    engine = make_engine(model_dir, **ppo())
    engine.train_step(rewarded(0))
    files = assert_export_loads_with_engine_logprobs(engine, model_dir, tmp_path / "export", 1.0)
    assert files
    engine.close()


def test_an_episode_with_environment_tokens_trains_on_the_policy_tokens_only(model_dir):
    # Every other completion token written by an environment (mask 0): GAE bridges them
    # (tests/learner/algos/test_gae.py), the losses count the policy's tokens only.
    engine = make_engine(model_dir, **ppo())
    items = [msgspec.structs.replace(it, completion_mask=([1, 0] * len(it.completion_ids))[:len(it.completion_ids)])
             for it in rewarded(0)]
    m = engine.train_step(items)
    assert m["response_tokens"] == sum(sum(it.completion_mask) for it in items)
    assert m["value_loss"] > 0.0 and m["return_mean"] > 0.0
    engine.close()


def test_config_errors_name_the_key(model_dir):
    with pytest.raises(msgspec.ValidationError, match=r"advantage\.critic\.kind"):
        msgspec.convert({"name": "gae", "critic": {"kind": "separate"}}, AdvantageConfig)
    with pytest.raises(msgspec.ValidationError, match=r"advantage\.process"):
        msgspec.convert({"name": "gae", "process": "steps"}, AdvantageConfig)
    with pytest.raises(msgspec.ValidationError, match="value_clip"):
        msgspec.convert({"name": "gae", "critic": {"value_clip": -1}}, AdvantageConfig)
    cfg = TrainEngineConfig(model_path=str(model_dir), zero_stage=0, advantage=AdvantageConfig(name="gae"),
                            lora=LoraConfig(enabled=True, target_modules=("q_proj",)))
    from rlvr.learner.train.engine import LearnerEngine

    with pytest.raises(CriticUnsupportedError, match="lora.enabled"):
        LearnerEngine(cfg, seed=0)


@pytest.mark.parametrize("overrides", [{"zero_stage": 0}, {"zero_stage": 3}, {"pack_sequences": True}],
                         ids=["zero0", "zero3", "packed"])
def test_zero_stages_and_packing_give_the_same_ppo_step(model_dir, tmp_path, overrides):
    # The value head under every ZeRO stage (ZeRO-3 partitions it and gathers it in its hooks) and
    # on packed rows: the same first step as the ZeRO-2 padded reference, and an export without it.
    keys = ("loss", "value_loss", "value_clip_frac", "explained_variance", "value_mean", "return_mean")
    reference = make_engine(model_dir, **ppo())
    expected = reference.train_step(rewarded(0))
    reference.close()
    engine = make_engine(model_dir, **ppo(), **overrides)
    got = engine.train_step(rewarded(0))
    for key in keys:
        assert got[key] == pytest.approx(expected[key], rel=1e-4, abs=1e-6), key
    files = assert_export_loads_with_engine_logprobs(engine, model_dir, tmp_path / "export", 1.0)
    assert files
    engine.close()


def test_the_step_reports_the_critic_on_the_formulas(model_dir):
    # The step's value/return means and explained variance are gae.py's functions on the
    # step's own old values (here: after one step, so the head is not all zeros).
    from rlvr.learner.algos.gae import explained_variance, gae_advantages_returns, token_level_rewards

    engine = make_engine(model_dir, **ppo())
    engine.train_step(rewarded(0))
    items = rewarded(1)
    mb = micro_batches(items, 1 << 20, 0)[0]
    with torch.no_grad():
        _, _, v = micro_batch_logprobs_values(engine.ds, mb, 1.0, engine._device, value_head(engine.ds.module))
    mask = mb.loss_mask
    adv, ret = gae_advantages_returns(token_level_rewards(mb.rewards, mask), v, mask, 1.0, 0.95)
    m = engine.train_step(items)
    assert m["value_mean"] == pytest.approx(float(v[mask].mean()), abs=1e-5)
    assert m["return_mean"] == pytest.approx(float(ret[mask].mean()), abs=1e-5)
    assert m["advantage_raw_mean"] == pytest.approx(float(adv[mask].mean()), abs=1e-5)
    assert m["explained_variance"] == pytest.approx(explained_variance(v, ret, mask), abs=1e-4)
    engine.close()


def test_the_head_leaves_the_random_stream_as_a_group_estimator_run_has_it(model_dir):
    # Same seed, same sampling: PPO's first rollouts and evaluations draw what GRPO's do.
    grpo = make_engine(model_dir)
    after_grpo = torch.rand(4)
    grpo.close()
    engine = make_engine(model_dir, **ppo())
    assert torch.equal(torch.rand(4), after_grpo)
    engine.close()
