"""The learner role on a real nats-server with real DeepSpeed (CPU):
streaming training, weight broadcast, exactly-once across SIGKILLs."""

from __future__ import annotations

import json
import random
import signal
from pathlib import Path

import anyio
import msgspec
import pytest
import torch
from safetensors.torch import load_file

from rlvr.learner.custody.checkpoint import CheckpointStore
from rlvr.learner.example.tiny_model import build_tiny_model
from rlvr.protocol import WeightsAnnouncement
from tests.busclient import BusClient
from tests.conftest import wait_for, write_config
from tests.factories import scored_messages
from tests.learner.learner_helpers import final_weights, learner_config, scored_groups


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny", hidden=64, layers=1, heads=2)


def _vocab(model: Path) -> int:
    return json.loads((model / "config.json").read_text())["vocab_size"]


@pytest.mark.parametrize("zero_stage", [2, 3])
def test_learner_trains_from_scored_stream_and_broadcasts_weights_a_rollout_engine_loads(
    zero_stage, actors, nats_server, tmp_path, tiny_model
):
    run = f"lz{zero_stage}"
    bus = BusClient(nats_server.url, run)
    cfg = learner_config(tmp_path, run, tiny_model, zero_stage=zero_stage, steps=2, groups_per_step=2)
    proc = actors.start("learn", cfg, "learn-0")
    bus.wait_heartbeat(lambda hb: hb.role == "learn" and hb.state == "running", timeout_s=120)
    bus.publish_scored(scored_messages(scored_groups(run, 4, vocab=_vocab(tiny_model))))
    assert proc.wait(timeout=300) == 0, actors.log_text("learn-0")[-3000:]

    ann = bus.decoded("WEIGHTS", WeightsAnnouncement)
    assert [a.version for a in ann] == [2] and ann[0].transport == "object_store" and ann[0].tied_embeddings
    assert ann[0].step == 2 and ann[0].files and all(len(f.sha256) == 64 for f in ann[0].files)

    # A rollout hf engine fetches the blob over the bus, checks it and loads it...
    from rlvr.rollout.config import RolloutConfig
    from rlvr.rollout.engines.base import HFEngineConfig, make_engine
    from rlvr.rollout.weights_sync import WeightsWatcher
    from rlvr.protocol import SamplingParams

    engine = make_engine(HFEngineConfig(model=str(tiny_model)))

    class _Actor:  # the watcher only needs the engine and the serving version
        def __init__(self):
            self.engine = engine
            self.weights_fetch_s = self.weights_load_s = 0.0

        @property
        def version(self):
            return engine.weights_version

        def abort_in_flight(self):
            return 0

    async def load_and_generate():
        from rlvr.actors.bus import Bus
        from rlvr.actors.config import BusConfig, NatsConfig
        from rlvr.protocol import RunNames

        await engine.start()
        b = await Bus.connect(NatsConfig(url=nats_server.url), BusConfig(), RunNames(run), "test")
        try:
            watcher = WeightsWatcher(b, _Actor(), RolloutConfig(weights_cache_dir=str(tmp_path / "cache")))
            assert await watcher.apply(ann[0])
            return await engine.generate("12+7=", 2, SamplingParams(max_tokens=6, seed=1))
        finally:
            await b.close()
            await engine.close()

    result = anyio.run(load_and_generate)
    assert result.weights_version_min == 2

    # ...and its log-probs are those of the learner's weights (its last checkpoint).
    from rlvr.learner.train.engine import LearnerEngine
    from rlvr.learner.engine_config import TrainEngineConfig

    store = CheckpointStore(tmp_path / f"out-{run}" / "checkpoints")
    state = store.load_latest()
    assert state is not None and state.step == 2 and state.version == 2
    learner = LearnerEngine(TrainEngineConfig(model_path=str(tiny_model), zero_stage=zero_stage), seed=0)
    learner.load_checkpoint(store.engine_dir(state.commits))
    for gen in result.generations:
        expected = learner.logprobs(result.prompt_ids, gen.ids)
        assert max(abs(a - b) for a, b in zip(gen.logprobs, expected, strict=True)) < 1e-3
    learner.close()


def test_exactly_once_across_sigkills(actors, nats_server, tmp_path, tiny_model):
    """SIGKILL the learner at random points, restart it each time; every
    published sample ends up trained exactly once or in a counted drop, and
    the final weights equal an uninterrupted run's."""
    rng = random.Random(1234)
    vocab = _vocab(tiny_model)
    groups = 14  # 2 zero-variance groups dropped, 1 sample failed verification
    samples = scored_groups("eo", groups, vocab=vocab, zero_variance=(3, 9), failed_sample_in=(5,))
    kept_groups = groups - 2
    steps = kept_groups // 2

    def publish_all(run: str) -> BusClient:
        bus = BusClient(nats_server.url, run)
        bus.publish_scored(scored_messages(scored_groups(run, groups, vocab=vocab, zero_variance=(3, 9),
                                                         failed_sample_in=(5,))))
        return bus

    # The interrupted run.
    out = tmp_path / "out-eo"
    # Checkpoints every 2 steps, so a kill usually lands on trained-but-uncommitted steps.
    cfg = learner_config(tmp_path, "eo", tiny_model, zero_stage=2, steps=steps, groups_per_step=2, out_dir=out,
                         checkpoint_every=2)
    first = actors.start("learn", cfg, "learn-0")
    BusClient(nats_server.url, "eo").wait_heartbeat(lambda hb: hb.role == "learn", timeout_s=120)
    publish_all("eo")
    kills = 0
    for attempt in range(1, 4):
        target = rng.randint(1, steps - 1)  # kill once this many steps are logged, plus a random delay
        proc = actors.procs[f"learn-{attempt - 1}"]
        log = actors.logs[f"learn-{attempt - 1}"]
        reached = wait_for(lambda: proc.poll() is not None or log.read_text().count('"event": "step"') >= target,
                           timeout_s=240, what=f"step {target}")
        if proc.poll() is not None:
            break
        anyio.run(anyio.sleep, rng.random() * 0.5)  # a random moment after that step, not a synchronisation
        if proc.poll() is None:
            actors.kill(f"learn-{attempt - 1}", signal.SIGKILL)
            proc.wait()
            kills += 1
        actors.start("learn", cfg, f"learn-{attempt}")
        del reached
    last = actors.procs[f"learn-{len(actors.procs) - 1}"]
    assert last.wait(timeout=300) == 0
    assert kills >= 1 and first.returncode != 0

    entries = CheckpointStore(out / "checkpoints").ledger_entries()
    trained = [sid for e in entries for sid in e.trained]
    dropped = {sid: reason for e in entries for sid, reason in e.dropped.items()}
    published = {sc.sample_id for sc in samples}
    assert len(trained) == len(set(trained)), "a sample was trained twice"
    assert not set(trained) & set(dropped)
    assert set(trained) | set(dropped) == published
    assert sorted(set(dropped.values())) == ["verify_failed", "zero_variance"]
    assert sum(r == "zero_variance" for r in dropped.values()) == 8 and len(trained) == len(published) - 9

    # The uninterrupted run over the same stream gives the same weights.
    ref_out = tmp_path / "out-ref"
    ref_cfg = learner_config(tmp_path, "eo", tiny_model, zero_stage=2, steps=steps, groups_per_step=2,
                             out_dir=ref_out, checkpoint_every=2)
    ref_cfg = write_config(tmp_path / "ref.json", {**json.loads(ref_cfg.read_text()), "run": "ref"})
    ref = actors.start("learn", ref_cfg, "learn-ref")
    BusClient(nats_server.url, "ref").wait_heartbeat(lambda hb: hb.role == "learn", timeout_s=120)
    publish_all("ref")
    assert ref.wait(timeout=300) == 0
    a = load_file(final_weights(out) / "model.safetensors")
    b = load_file(final_weights(ref_out) / "model.safetensors")
    assert final_weights(out).name == final_weights(ref_out).name == f"v{steps}"
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_learner_exits_0_on_sigterm(actors, nats_server, tmp_path):
    cfg = write_config(tmp_path / "dry.json", {"run": "dry", "bus": {"heartbeat_every_s": 0.5},
                                               "learn": {"steps": 100, "out_dir": str(tmp_path / "o")}})
    proc = actors.start("learn", cfg, "learn-0")
    bus = BusClient(nats_server.url, "dry")
    bus.wait_heartbeat(lambda hb: hb.role == "learn" and hb.state == "running")
    wait_for(lambda: bus.stream_count("TASKS") > 0, what="the feeder publishing tasks")
    actors.kill("learn-0", signal.SIGTERM)
    assert proc.wait(timeout=10) == 0


def test_token_ids_outside_the_vocabulary_are_dead_lettered_and_the_learner_trains_on(
    actors, nats_server, tmp_path, tiny_model
):
    """An id past the embedding would be a device-side assert on a GPU, replayed
    after every restart: the learner refuses the group message that carries it
    (a dead letter naming the member, every member a counted drop in its ledger)
    and trains on the good groups."""
    from rlvr.protocol import Completion, DeadLetter

    run = "oov"
    vocab = _vocab(tiny_model)
    bus = BusClient(nats_server.url, run)
    cfg = learner_config(tmp_path, run, tiny_model, zero_stage=2, steps=1, groups_per_step=1)
    proc = actors.start("learn", cfg, "learn-0")
    bus.wait_heartbeat(lambda hb: hb.role == "learn" and hb.state == "running", timeout_s=120)
    bad_group, good_group = scored_messages(scored_groups(run, 2, vocab=vocab))
    sample = msgspec.structs.replace(bad_group.samples[2], completion=Completion([3, vocab + 7], [-1.0, -1.0]))
    bad = msgspec.structs.replace(bad_group, samples=[*bad_group.samples[:2], sample, *bad_group.samples[3:]])
    bus.publish_scored([bad, good_group])
    assert proc.wait(timeout=300) == 0, actors.log_text("learn-0")[-3000:]

    letters = bus.decoded("DEAD", DeadLetter)
    assert len(letters) == 1
    assert f"samples[2].completion.ids[1] = {vocab + 7} is outside the learner's vocabulary" in letters[0].reason
    entries = CheckpointStore(tmp_path / f"out-{run}" / "checkpoints").ledger_entries()
    assert {sid: r for e in entries for sid, r in e.dropped.items()} == {s.sample_id: "invalid" for s in bad.samples}
    assert sorted(sid for e in entries for sid in e.trained) == sorted(s.sample_id for s in good_group.samples)
