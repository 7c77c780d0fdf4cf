"""A rollout replica with real weights (``hf`` engine, tiny model) on a real nats-server.

Covers what needs real weights: live reloads announced on the WEIGHTS stream
and fetched from the object store (the learner's ``publish_weights``), the
rejection of a corrupt or incomplete blob while the old policy keeps serving,
and a prompt longer than the engine's limit (n ``rejected`` samples, acked).

One replica process serves the whole module (its start, torch and the model,
is the expensive part). Tests read the version it serves from its heartbeat
and only ever move it forward, so they do not depend on their order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import pytest

from rlvr.actors.bus import Bus
from rlvr.actors.config import BusConfig, NatsConfig
from rlvr.cli.natsserver import NatsServer
from rlvr.learner.weights.publish import publish_weights
from rlvr.protocol import RunNames, Sample, Task
from tests.busclient import BusClient
from tests.conftest import ActorProcs, wait_for, write_config
from tests.factories import make_task

RUN = "rw"
REPLICA = "rollout-hf"
MAX_PROMPT_TOKENS = 32


class Replica(msgspec.Struct):
    url: str
    bus: BusClient
    procs: ActorProcs
    counter: list[int]

    def version(self) -> int:
        return self.bus.wait_heartbeat(lambda hb: hb.replica == REPLICA).policy_version

    def task(self, prompt: str = "12+7=", n: int = 4) -> Task:
        self.counter[0] += 1
        task = make_task(RUN, k=self.counter[0], prompt=prompt, n=n)
        self.bus.publish(self.bus.names.tasks, task, msg_id=task.task_id)
        return task

    def samples_of(self, task: Task) -> list[Sample]:
        def group():
            got = [s for s in self.bus.rollouts() if s.task_id == task.task_id]
            return len(got) >= task.n and got

        return sorted(wait_for(group, timeout_s=60, what=f"samples of {task.task_id}"), key=lambda s: s.sample_index)

    def log_events(self, event: str) -> list[dict]:
        out = []
        for line in self.procs.log_text(REPLICA).splitlines():
            try:
                rec = json.loads(line)
            except ValueError:  # a library's plain-text warning
                continue
            if isinstance(rec, dict) and rec.get("event") == event:
                out.append(rec)
        return out


@pytest.fixture(scope="module")
def replica(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replica]:
    root = tmp_path_factory.mktemp("rollout-hf")
    with NatsServer(root / "nats") as server:
        procs = ActorProcs(root, server.url)
        try:
            cfg = write_config(
                root / "rollout.json",
                {
                    "run": RUN,
                    "bus": {"ack_wait_s": 30.0, "heartbeat_every_s": 0.3, "fetch_timeout_s": 0.5},
                    "observability": {"log_format": "json"},
                    "rollout": {
                        "engine": {"kind": "hf", "model": str(tiny_model), "max_prompt_tokens": MAX_PROMPT_TOKENS},
                        "max_inflight_tasks": 2,
                        "weights_cache_dir": str(root / "weights-cache"),
                    },
                },
            )
            procs.init(cfg)  # the learner's job: a rollout only binds
            procs.start("rollout", cfg, REPLICA)
            bus = BusClient(server.url, RUN)
            bus.wait_heartbeat(lambda hb: hb.replica == REPLICA and hb.state == "running", timeout_s=60)
            yield Replica(server.url, bus, procs, [0])
        finally:
            procs.stop_all()


def _publish(url: str, directory: Path, version: int, *, sha256: str | None = None) -> None:
    """Upload ``directory/model.safetensors`` and announce it, as the learner does."""
    path = directory / "model.safetensors"
    data = path.read_bytes()
    files = [(path.name, sha256 or hashlib.sha256(data).hexdigest(), len(data))]

    async def go() -> None:
        bus = await Bus.connect(NatsConfig(url=url), BusConfig(), RunNames(RUN), "test-learner")
        try:
            await publish_weights(bus, directory, files, version=version, step=version, dtype="float32",
                                  tied_embeddings=True)
        finally:
            await bus.close()

    anyio.run(go)


def test_a_published_policy_is_loaded_and_later_samples_carry_its_version_and_weights(
    replica: Replica, weight_dirs, reference
):
    new = replica.version() + 1
    _publish(replica.url, weight_dirs["perturbed"], new)

    hb = replica.bus.wait_heartbeat(lambda hb: hb.replica == REPLICA and hb.policy_version == new, timeout_s=60)
    assert hb.gauges["weights_load_s"] > 0 and hb.gauges["weights_fetch_s"] > 0
    samples = replica.samples_of(replica.task())
    assert all(s.policy_version == new and s.policy_version_max == new for s in samples)
    # The replica really serves the new weights (lm_head included), not only a new label.
    for s in samples:
        ids = list(s.completion.ids)
        new_lp = reference.logprobs(weight_dirs["perturbed"], list(s.prompt_ids), ids, 1.0)
        old_lp = reference.logprobs(weight_dirs["base"], list(s.prompt_ids), ids, 1.0)
        assert max(abs(a - b) for a, b in zip(s.completion.logprobs, new_lp, strict=True)) < 1e-3
        assert max(abs(a - b) for a, b in zip(s.completion.logprobs, old_lp, strict=True)) > 1e-2


def test_a_corrupt_or_headless_blob_is_rejected_and_the_old_version_keeps_serving(
    replica: Replica, weight_dirs
):
    old = replica.version()
    _publish(replica.url, weight_dirs["perturbed"], old + 1, sha256="0" * 64)  # sha mismatch
    _publish(replica.url, weight_dirs["no_head"], old + 2)  # tied model, no lm_head.weight

    def rejected():
        seen = {e["version"]: e["reason"] for e in replica.log_events("weights_rejected")}
        return {old + 1, old + 2} <= set(seen) and seen

    reasons = wait_for(rejected, timeout_s=60, what="both blobs rejected")
    assert "sha256" in reasons[old + 1] and "lm_head.weight" in reasons[old + 2]
    assert replica.version() == old
    samples = replica.samples_of(replica.task())
    assert all(s.policy_version == old and s.policy_version_max == old for s in samples)
    assert replica.procs.procs[REPLICA].poll() is None


def test_a_prompt_longer_than_the_limit_gives_n_rejected_samples_and_is_acked(replica: Replica):
    version = replica.version()
    task = replica.task(prompt=" ".join(["12+7=19"] * MAX_PROMPT_TOKENS), n=3)
    samples = replica.samples_of(task)
    assert [s.sample_index for s in samples] == [0, 1, 2]
    assert all(s.finish_reason == "rejected" and not s.completion.ids and s.group_id == task.task_id
               for s in samples)
    assert all(s.policy_version == version for s in samples)
    wait_for(lambda: replica.bus.stream_count("TASKS") == 0, what="the task acked")
    assert replica.bus.stream_count("DEAD") == 0
    assert any(e.get("task_id") == task.task_id for e in replica.log_events("prompt_rejected"))
    # The replica is still serving.
    assert replica.samples_of(replica.task())[0].finish_reason in {"stop", "length"}
