"""Samples of any length travel (issue 46), with real role processes on a real nats-server: a group
of two 200k-token samples on the embedded server's limits, and of two 1M-token samples on
``ops/nats/single.conf``, go rollout -> verify -> learn by reference (the trivial engine at a fixed
length, a dry learner) and are trained exactly once, their body deleted once their fate is
committed; a group past ``bus.max_group_bytes`` is counted as rejected, never generated again; and a
hostile reference (another task's body, another run's name or object, nothing, a wrong digest or
size) is dead-lettered by the verifier and by the learner, naming the field; a referenced copy
dead-lettered as a conflict keeps its body, readable through its letter, after its twin is trained
and committed. ``up`` with a 1M-token
sample is tests/cli/test_up_long_samples.py."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import anyio
import msgspec
import pytest

from rlvr.actors.bodies import resolve, store_body
from rlvr.learner.custody.checkpoint import CheckpointStore
from rlvr.protocol import DeadLetter, SampleGroup, ScoredGroup, Verdict, VerifierSpec, decode
from rlvr.protocol.groups import scored_group_msg_id
from tests.actors.bodies_helpers import (BIG, client_bus, hostile_references, long_group, owner_bus, scored,
                                         stored_bodies)
from tests.actors.natsauth import start_server, stop_server
from tests.busclient import BusClient
from tests.conftest import REPO, ActorProcs, wait_for, write_config

pytestmark = pytest.mark.slow


def long_run_config(path: Path, run: str, tokens: int, out: Path, **bus: object) -> Path:
    """One step of one group of two ``tokens``-token samples: the trivial engine at a fixed length
    (sigma 0), the exact verifier, a dry learner that trains every group (no dynamic sampling)."""
    return write_config(path, {
        "run": run,
        "bus": {"heartbeat_every_s": 0.5, "ack_wait_s": 30.0, **bus},
        "rollout": {"engine": {"kind": "trivial", "lengths": {"median_tokens": tokens, "sigma": 0.0,
                                                               "vocab_size": 256}}},
        "verify": {"pool_size": 1, "warm_verifiers": [], "concurrency": 1},
        "learn": {"group_size": 2, "groups_per_step": 1, "steps": 1, "max_staleness": 1000, "checkpoint_every": 1,
                  "max_inflight_tasks": 1, "dynamic_sampling": False, "out_dir": str(out),
                  "sampling": {"temperature": 1.0, "max_tokens": tokens}},
    })


def _trained(out: Path) -> list[str]:
    return [sid for e in CheckpointStore(out / "checkpoints").ledger_entries() for sid in e.trained]


def _dead(bus: BusClient) -> list[DeadLetter]:
    return bus.decoded("DEAD", DeadLetter)


def _bodies(url: str, run: str) -> dict[str, int]:
    async def go():
        b = await owner_bus(url, run)
        try:
            return await stored_bodies(b)
        finally:
            await b.close()

    return anyio.run(go)


def _one_long_run(tmp_path: Path, url: str, run: str, tokens: int) -> None:
    """rollout -> verify -> learn with one group of two ``tokens``-token samples: trained once, by reference."""
    out = tmp_path / "out"
    cfg = long_run_config(tmp_path / "run.json", run, tokens, out)
    procs = ActorProcs(tmp_path, url)
    try:
        learner = procs.start("learn", cfg, "learn-0")
        procs.start("rollout", cfg, "rollout-0")
        procs.start("verify", cfg, "verify-0")
        assert learner.wait(timeout=600) == 0, procs.log_text("learn-0")[-3000:]
        bus = BusClient(url, run)
        scored_msgs = bus.decoded("SCORED", ScoredGroup)
        trained = _trained(out)
        first = next(g for g in scored_msgs if trained and trained[0].startswith(g.task_id + "/"))
        assert first.body is not None and first.samples == []  # it travelled by reference
        assert sorted(trained) == [f"{first.task_id}/0", f"{first.task_id}/1"]  # both samples, once each
        assert first.body.size > 10 * tokens  # ~10 bytes a token: the whole completions went
        assert first.body.name not in _bodies(url, run)  # its fate committed: its body deleted
        assert _dead(bus) == []
        steps = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "step" in r
                 and "response_len_max" in r]
        assert [r["response_len_max"] for r in steps] == [tokens]  # the learner held the whole completions
    finally:
        procs.stop_all()


def test_a_group_of_200k_token_samples_travels_by_reference_and_is_trained_once(nats_server, tmp_path):
    _one_long_run(tmp_path, nats_server.url, "long200k", 200_000)


def test_a_group_of_1m_token_samples_is_trained_once_under_the_shipped_single_conf(tmp_path):
    text = (REPO / "ops" / "nats" / "single.conf").read_text()
    assert "max_payload: 8MB" in text and "store_dir: /data/nats" in text
    conf = tmp_path / "single.conf"
    conf.write_text(text.replace("store_dir: /data/nats", f"store_dir: {tmp_path / 'js'}"))
    proc, port = start_server(conf, tmp_path / "nats-server.log")
    try:
        _one_long_run(tmp_path, f"nats://127.0.0.1:{port}", "long1m", 1_000_000)
    finally:
        stop_server(proc)


def _referenced_scored(url: str, run: str, group) -> ScoredGroup:
    """Store ``group``'s body and publish its ScoredGroup by reference, as a rollout and a verifier
    would; the message published."""
    from rlvr.actors.bodies import store_body

    async def go():
        bus = await client_bus(url, run)
        try:
            ref = await store_body(bus, group)
            whole = scored(group)
            message = ScoredGroup(whole.run, whole.task_id, [], whole.verdicts, whole.replica, body=ref)
            await bus.publish(bus.names.scored, message, msg_id=scored_group_msg_id(whole))
            return message
        finally:
            await bus.close()

    return anyio.run(go)


def test_a_learner_killed_while_it_holds_a_1m_token_sample_trains_it_once_after_a_restart(actors, nats_server,
                                                                                          tmp_path):
    run, out = "killlong", tmp_path / "o"
    cfg = write_config(tmp_path / "learn.json", {
        "run": run, "bus": {"heartbeat_every_s": 0.5, "ack_wait_s": 30.0},
        "learn": {"group_size": 2, "groups_per_step": 2, "steps": 1, "max_staleness": 1000, "checkpoint_every": 100,
                  "dynamic_sampling": False, "out_dir": str(out), "lease_ttl_s": 2.0},
    })
    first = actors.start("learn", cfg, "learn-0")
    bus = BusClient(nats_server.url, run)
    bus.wait_heartbeat(lambda hb: hb.role == "learn" and hb.state == "running", timeout_s=120)
    held = _referenced_scored(nats_server.url, run, long_group(run, f"{run}-a", [1_000_000, 10]))
    # Held, waiting for a second group to make its step (groups_per_step = 2): custody has it, nothing is committed.
    bus.wait_heartbeat(lambda hb: hb.replica == "learn-0" and hb.gauges.get("held", 0) >= 2, timeout_s=120)
    actors.kill("learn-0", signal.SIGKILL)
    first.wait()
    assert not (out / "checkpoints" / "latest").exists()
    assert held.body.name in _bodies(nats_server.url, run)  # not deleted: its fate was never committed

    second = actors.start("learn", cfg, "learn-1")
    other = _referenced_scored(nats_server.url, run, long_group(run, f"{run}-b", [200_000, 10]))
    assert second.wait(timeout=300) == 0, actors.log_text("learn-1")[-3000:]
    assert sorted(_trained(out)) == [f"{run}-a/0", f"{run}-a/1", f"{run}-b/0", f"{run}-b/1"]  # each once
    assert not {held.body.name, other.body.name} & set(_bodies(nats_server.url, run))  # committed: deleted
    assert _dead(bus) == []


def test_hostile_references_are_dead_lettered_by_the_verifier_and_by_the_learner(actors, nats_server, tmp_path):
    run = "hostile"
    cfg = long_run_config(tmp_path / "run.json", run, 1000, tmp_path / "o")
    actors.start("learn", cfg, "learn-0")
    actors.start("verify", cfg, "verify-0")
    bus = BusClient(nats_server.url, run)
    running: set[str] = set()
    bus.wait_heartbeat(lambda hb: hb.state == "running" and (running.add(hb.role) or running >= {"learn", "verify"}),
                       timeout_s=120)

    async def publish_all():
        mine, other = await client_bus(nats_server.url, run), await owner_bus(nats_server.url, "otherrun")
        fields = {}
        try:
            for k, case in enumerate(hostile_references(run)):
                group, field = await case(mine, other, f"{run}-t{k}")  # a task each: no copy of another
                await mine.publish(mine.names.rollouts, group, msg_id=f"hostile-{k}/group")
                message = ScoredGroup(run, group.task_id, [], [Verdict(1.0, "ok", "exact")], "v", body=group.body)
                await mine.publish(mine.names.scored, message, msg_id=f"hostile-{k}/scored")
                fields[f"hostile-{k}"] = field
        finally:
            await mine.close()
            await other.close()
        return fields

    fields = anyio.run(publish_all)
    wait_for(lambda: len(_dead(bus)) >= 2 * len(fields), timeout_s=120, what="every hostile reference dead-lettered")
    letters = _dead(bus)
    assert sorted(d.stage for d in letters) == ["learn"] * len(fields) + ["verify"] * len(fields)
    for d in letters:
        field = fields[d.headers["Nats-Msg-Id"].split("/")[0]]
        assert d.kind == "invalid" and d.reason.startswith(field), (d.stage, d.reason)
    assert len(bus.stream_messages("SCORED")) == len(fields)  # the verifier published nothing of them
    hb = bus.wait_heartbeat(lambda hb: hb.role == "learn", timeout_s=30)
    assert hb.gauges["held"] == 0 and hb.counters.get("samples_trained", 0) == 0  # custody never received them


def test_a_group_past_max_group_bytes_is_counted_as_rejected_and_never_generated_again(actors, nats_server,
                                                                                       tmp_path):
    run = "toolarge"
    # Two 200k-token samples are ~4 MB: past a bound of 1 MiB.
    cfg = long_run_config(tmp_path / "run.json", run, 200_000, tmp_path / "o", max_group_bytes=1 << 20)
    for role in ("learn", "rollout", "verify"):
        actors.start(role, cfg, f"{role}-0")
    bus = BusClient(nats_server.url, run)
    bus.wait_heartbeat(lambda hb: hb.role == "learn" and hb.counters.get("drop_rejected", 0) >= 4, timeout_s=180)
    first = bus.decoded("SCORED", ScoredGroup)[0]
    assert [s.finish_reason for s in first.samples] == ["rejected", "rejected"]
    assert "more than bus.max_group_bytes = 1048576" in first.samples[0].text
    assert {v.outcome for v in first.verdicts} == {"parse_error"}
    assert "bus.max_group_bytes" in first.verdicts[0].detail
    info = bus.consumer("TASKS", "rollout")
    assert info.num_redelivered == 0  # each task generated once: no crash loop
    assert _dead(bus) == [] and "Traceback" not in actors.log_text("rollout-0")


def test_a_referenced_copy_dead_lettered_as_a_conflict_keeps_its_body_readable_after_its_twin_is_trained(
        actors, nats_server, tmp_path):
    # Two referenced copies of one task that mean other work (another gold): the learner keeps one (the
    # first here: its group came complete, so it stands) and dead-letters the other as a conflict. Its
    # body must outlive the step and the commit that delete the kept copy's body: the letter is read
    # through it.
    run, out = "aside", tmp_path / "o"
    cfg = write_config(tmp_path / "run.json", {
        "run": run, "bus": {"heartbeat_every_s": 0.5, "ack_wait_s": 30.0},
        "learn": {"group_size": 2, "groups_per_step": 2, "steps": 1, "max_staleness": 1000, "checkpoint_every": 1,
                  "max_inflight_tasks": 1, "dynamic_sampling": False, "out_dir": str(out)},
    })
    first = long_group(run, f"{run}-a", [BIG, 10])
    other_gold = long_group(run, f"{run}-a", [BIG, 10])
    other_gold.samples[:] = [msgspec.structs.replace(s, verifier=VerifierSpec("exact", {"gold": "2"}))
                             for s in other_gold.samples]
    copies = [scored(first), scored(other_gold)]

    async def publish(groups):
        bus = await owner_bus(nats_server.url, run)
        try:
            refs = []
            for whole in groups:
                ref = await store_body(bus, SampleGroup(run, whole.task_id, whole.samples))
                await bus.publish(bus.names.scored, msgspec.structs.replace(whole, samples=[], body=ref),
                                  msg_id=scored_group_msg_id(whole))
                refs.append(ref)
            return refs
        finally:
            await bus.close()

    refs = anyio.run(publish, copies)
    learner = actors.start("learn", cfg, "learn-0")
    bus = BusClient(nats_server.url, run)
    bus.wait_heartbeat(lambda hb: hb.role == "learn" and hb.counters.get("drop_conflict", 0) >= 2, timeout_s=120)
    anyio.run(publish, [scored(long_group(run, f"{run}-b", [10, 10]))])  # the step's second group
    assert learner.wait(timeout=300) == 0, actors.log_text("learn-0")[-3000:]

    assert sorted(_trained(out)) == [f"{run}-a/0", f"{run}-a/1", f"{run}-b/0", f"{run}-b/1"]
    (letter,) = _dead(bus)
    assert letter.stage == "learn" and letter.kind == "conflict"
    from_letter = decode(letter.data, ScoredGroup)
    assert from_letter.body in refs
    aside = refs.index(from_letter.body)
    # The kept copy's body went with the commit; the letter's stays, and reads back whole.
    assert set(_bodies(nats_server.url, run)) >= {refs[aside].name}
    assert refs[1 - aside].name not in _bodies(nats_server.url, run)

    async def read_back():
        b = await client_bus(nats_server.url, run)
        try:
            return await resolve(b, from_letter)
        finally:
            await b.close()

    assert anyio.run(read_back).samples == copies[aside].samples
