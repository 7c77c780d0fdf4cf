"""PPO's critic in the learner role, on a real nats-server with real DeepSpeed (CPU): it trains
from the SCORED stream, reports the critic's metrics, and after a SIGKILL resumes exactly once,
value head included: the final weights and head equal an uninterrupted run's."""

from __future__ import annotations

import json
import random
import signal
from pathlib import Path

import anyio
import pytest
import torch
from safetensors.torch import load_file

from rlvr.learner.custody.checkpoint import CheckpointStore
from rlvr.learner.example.tiny_model import build_tiny_model
from tests.busclient import BusClient
from tests.conftest import wait_for, write_config
from tests.factories import scored_messages
from tests.learner.learner_helpers import final_weights, learner_config, scored_groups

GROUPS = 7  # one zero-variance group (dropped): 6 kept, 3 steps of 2
STEPS = 3


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny", hidden=64, layers=1, heads=2)


def _ppo_config(tmp_path: Path, run: str, model: Path, out: Path) -> Path:
    cfg = json.loads(learner_config(tmp_path, run, model, zero_stage=2, steps=STEPS, groups_per_step=2,
                                    out_dir=out, checkpoint_every=1).read_text())
    cfg["learn"]["engine"]["advantage"] = {"name": "gae", "gamma": 1.0, "lam": 0.95,
                                           "critic": {"lr": 1e-2, "warmup_steps": 1}}
    return write_config(tmp_path / f"{run}-ppo.json", cfg)


def _publish(url: str, run: str, vocab: int) -> None:
    BusClient(url, run).publish_scored(scored_messages(scored_groups(run, GROUPS, vocab=vocab, zero_variance=(3,))))


def _head(model: Path, out: Path, cfg_path: Path) -> dict[str, torch.Tensor]:
    from rlvr.cli.run_config import load_config
    from rlvr.learner.train.critic import value_head
    from rlvr.learner.train.engine import LearnerEngine

    store = CheckpointStore(out / "checkpoints")
    engine = LearnerEngine(load_config(cfg_path).learn.engine, seed=0)
    engine.load_checkpoint(store.committed_engine_dir())
    head = {k: v.detach().clone() for k, v in value_head(engine.ds.module).state_dict().items()}
    assert engine.critic_steps == STEPS
    engine.close()
    return head


def test_ppo_learner_resumes_exactly_once_after_sigkill(actors, nats_server, tmp_path, tiny_model):
    vocab = json.loads((tiny_model / "config.json").read_text())["vocab_size"]
    out = tmp_path / "out-ppo"
    cfg = _ppo_config(tmp_path, "ppo", tiny_model, out)
    first = actors.start("learn", cfg, "learn-0")
    BusClient(nats_server.url, "ppo").wait_heartbeat(lambda hb: hb.role == "learn", timeout_s=120)
    _publish(nats_server.url, "ppo", vocab)
    log = actors.logs["learn-0"]
    wait_for(lambda: first.poll() is not None or log.read_text().count('"event": "step"') >= 1,
             timeout_s=240, what="the first step")
    anyio.run(anyio.sleep, random.Random(3).random() * 0.5)  # a moment after it, not a synchronisation
    if first.poll() is None:
        actors.kill("learn-0", signal.SIGKILL)
        first.wait()
    second = actors.start("learn", cfg, "learn-1")
    assert second.wait(timeout=300) == 0, actors.log_text("learn-1")[-3000:]
    assert first.returncode != 0

    entries = CheckpointStore(out / "checkpoints").ledger_entries()
    trained = [sid for e in entries for sid in e.trained]
    assert len(trained) == len(set(trained)) == STEPS * 2 * 4, "a sample trained twice, or lost"

    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r.get("event") == "step" or ("loss" in r and "step" in r)]
    assert steps and all(k in steps[-1] for k in ("value_loss", "explained_variance", "value_mean", "return_mean"))

    ref_out = tmp_path / "out-ref"
    ref_cfg = _ppo_config(tmp_path, "ref", tiny_model, ref_out)
    ref = actors.start("learn", ref_cfg, "learn-ref")
    BusClient(nats_server.url, "ref").wait_heartbeat(lambda hb: hb.role == "learn", timeout_s=120)
    _publish(nats_server.url, "ref", vocab)
    assert ref.wait(timeout=300) == 0
    a = load_file(final_weights(out) / "model.safetensors")
    b = load_file(final_weights(ref_out) / "model.safetensors")
    assert not any(k.startswith("rlvr_value_head") for k in a)  # the rollouts get the policy alone
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    head_a, head_b = _head(tiny_model, out, cfg), _head(tiny_model, ref_out, ref_cfg)
    assert all(torch.equal(head_a[k], head_b[k]) for k in head_a)
